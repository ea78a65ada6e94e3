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
    """Import each target: a dotted module name, or a path to a ``.py`` file (imported under
    its file name, so every node that loads the same file names its functions alike)."""
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


def _load_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise JobImportError(f"cannot import job module {str(path)!r}: no such file")
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
