"""Importing the user's job modules, by module name or ``.py`` path."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from easyjob.errors import ConfigError

__all__ = ["JobImportError", "load_jobs"]


class JobImportError(ConfigError):
    """A job module could not be imported."""


def load_jobs(targets: list[str]) -> list[ModuleType]:
    """Import each target: a dotted module name, or a path to a ``.py`` file.

    A file is imported under the name its module has when imported by name: inside packages
    (directories with ``__init__.py``), ``myapp/tick.py`` is ``myapp.tick``, as
    ``easyjob run myapp.tick`` would import it, so task names and function paths do not
    depend on how a node was started. A file outside any package is imported under its file
    name."""
    return [_load(target) for target in targets]


def _load(target: str) -> ModuleType:
    try:
        if target.endswith(".py") or "/" in target:
            return _load_file(Path(target))
        if "" not in sys.path and str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))
        return importlib.import_module(target)
    except JobImportError:
        raise
    except ConfigError:
        raise
    except Exception as err:
        raise JobImportError(
            f"cannot import job module {target!r}: {type(err).__name__}: {err}"
        ) from err


def _package_name(path: Path) -> tuple[str, Path] | None:
    """``(dotted name, directory above the outermost package)`` of a file inside packages."""
    parts = [path.stem]
    directory = path.parent
    while (directory / "__init__.py").is_file() and directory.name.isidentifier():
        parts.insert(0, directory.name)
        directory = directory.parent
    if len(parts) == 1 or not path.stem.isidentifier():
        return None
    return ".".join(parts), directory


def _load_package_file(path: Path, name: str, root: Path) -> ModuleType:
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    module = importlib.import_module(name)
    found = getattr(module, "__file__", None)
    if found is None or Path(found).resolve() != path:
        raise JobImportError(
            f"cannot import job module {str(path)!r} as {name!r}: that name is module {found!r}"
        )
    return module


def _load_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise JobImportError(f"cannot import job module {str(path)!r}: no such file")
    packaged = _package_name(path.resolve())
    if packaged is not None:
        return _load_package_file(path.resolve(), *packaged)
    name = path.stem
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path.resolve()):
        return sys.modules[name]
    directory = str(path.resolve().parent)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    spec = importlib.util.spec_from_file_location(name, path.resolve())
    if spec is None or spec.loader is None:
        raise JobImportError(f"cannot import job module {str(path)!r}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
