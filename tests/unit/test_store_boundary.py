"""Outside ``easyjob/store/`` the package depends on the store contract only: it imports
``easyjob.store`` and ``easyjob.store.contract``, nothing deeper, and never reaches through a
store to its database (``store.db``)."""

from __future__ import annotations

import ast
from pathlib import Path

import easyjob

PACKAGE = Path(easyjob.__file__).parent
ALLOWED = {"easyjob.store", "easyjob.store.contract"}


def _outside_store() -> list[Path]:
    store = PACKAGE / "store"
    return sorted(p for p in PACKAGE.rglob("*.py") if store not in p.parents)


def _store_imports(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "easyjob.store":  # from easyjob.store import runs
                names += [f"easyjob.store.{alias.name}" for alias in node.names]
                names = [n for n in names if n in ALLOWED or _is_module(n)]
        else:
            continue
        found += [(node.lineno, name) for name in names if name.startswith("easyjob.store")]
    return found


def _is_module(name: str) -> bool:
    path = PACKAGE.parent / name.replace(".", "/")
    return path.with_suffix(".py").exists() or path.is_dir()


def _db_reach_through(tree: ast.AST) -> list[int]:
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr == "db"
        and (
            (isinstance(node.value, ast.Name) and node.value.id.endswith("store"))
            or (isinstance(node.value, ast.Attribute) and node.value.attr.endswith("store"))
        )
    )


def test_no_module_outside_the_store_imports_a_store_internal() -> None:
    files = _outside_store()
    assert PACKAGE / "node" / "node.py" in files and len(files) > 40
    bad = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {name}"
        for path in files
        for line, name in _store_imports(ast.parse(path.read_text(encoding="utf-8")))
        if name not in ALLOWED
    ]
    assert bad == []


def test_no_module_outside_the_store_reaches_through_to_the_database() -> None:
    bad = [
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in _outside_store()
        for line in _db_reach_through(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert bad == []


def test_the_checks_catch_what_they_forbid() -> None:
    source = (
        "from easyjob.store.runs import BLOCKED\n"
        "import easyjob.store.engine\n"
        "from easyjob.store import runs, Store\n"
        "from easyjob.store.contract import Store\n"
        "x = self._store.db.now()\n"
        "y = store.db.url\n"
    )
    tree = ast.parse(source)
    imports = [name for _, name in _store_imports(tree) if name not in ALLOWED]
    assert imports == ["easyjob.store.runs", "easyjob.store.engine", "easyjob.store.runs"]
    assert _db_reach_through(tree) == [5, 6]
