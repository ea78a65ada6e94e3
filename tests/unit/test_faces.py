"""The CLI and the dashboard are two faces over one view model (``easyjob.views``): the
dashboard imports nothing of the CLI, the CLI imports the dashboard only inside the command
that serves it, and the view model imports neither."""

from __future__ import annotations

import ast
from pathlib import Path

import easyjob

PACKAGE = Path(easyjob.__file__).parent


def _imports(path: Path, *, top_level_only: bool) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def _modules(folder: str) -> list[Path]:
    return sorted((PACKAGE / folder).rglob("*.py"))


def test_the_dashboard_imports_nothing_of_the_cli() -> None:
    wrong = [
        (str(path.relative_to(PACKAGE)), line, name)
        for path in _modules("web")
        for line, name in _imports(path, top_level_only=False)
        if name.startswith("easyjob.cli")
    ]
    assert wrong == []


def test_the_cli_imports_the_dashboard_only_inside_a_command() -> None:
    wrong = [
        (str(path.relative_to(PACKAGE)), line, name)
        for path in _modules("cli")
        for line, name in _imports(path, top_level_only=True)
        if name.startswith("easyjob.web")
    ]
    assert wrong == []


def test_the_view_model_imports_neither_face() -> None:
    wrong = [
        (str(path.relative_to(PACKAGE)), line, name)
        for path in _modules("views")
        for line, name in _imports(path, top_level_only=False)
        if name.startswith(("easyjob.cli", "easyjob.web"))
    ]
    assert wrong == []
