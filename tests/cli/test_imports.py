"""The command line imports only what a subcommand needs: ``easyjob --version`` and
``--help`` start without SQLAlchemy, the store or the node (0.1 s of CPU, against 0.5 s when
everything was imported; docs/cli.md, "Start-up cost"), and ``from easyjob import
scheduled`` still works, each public name loaded on first use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import easyjob

HEAVY = ("sqlalchemy", "easyjob.store", "easyjob.node", "easyjob.web")
#: Left out of ``--version`` and ``--help`` too: the view model, the records and the
#: admission rule (40 ms of CPU of a 0.12 s call, imported through the calendar command's
#: output module before)
VIEWS = ("easyjob.views", "easyjob.core.records", "easyjob.core.admission")


def _imported_after(code: str, watched: tuple[str, ...] = HEAVY) -> list[str]:
    """The *watched* modules (and their submodules) a fresh interpreter has imported after
    running *code*."""
    probe = f"""
import contextlib, io, json, sys
with contextlib.redirect_stdout(io.StringIO()):
{code}
print(json.dumps(sorted(m for m in sys.modules
    if any(m == w or m.startswith(w + ".") for w in {watched!r}))))
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return list(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.parametrize(
    "argv", [["--version"], ["--help"], ["trigger", "--help"], ["calendar", "add", "--help"]]
)
def test_version_and_help_import_no_database_code(argv: list[str]) -> None:
    code = f"    from easyjob.cli import main\n    assert main({argv!r}) == 0"
    assert _imported_after(code, HEAVY + VIEWS) == []


def test_the_decorator_comes_without_the_store() -> None:
    code = "    from easyjob import scheduled, Misfire\n    assert callable(scheduled)"
    assert not [m for m in _imported_after(code) if m.startswith(("easyjob.node", "easyjob.web"))]


def test_a_trigger_imports_the_store_but_not_the_other_commands() -> None:
    code = (
        "    from easyjob.cli import _command\n"
        "    _command('trigger')\n"
        "    import easyjob.cli.stores\n"
    )
    found = _imported_after(code)
    assert "sqlalchemy" in found and "easyjob.store" in found
    assert not [m for m in found if m.startswith(("easyjob.node", "easyjob.web"))]
    assert _imported_after(code, ("easyjob.cli.commands", "easyjob.views.read")) == []


def test_a_calendar_command_imports_the_store_but_not_the_other_commands() -> None:
    code = (
        "    from easyjob.cli import _command\n"
        "    _command('calendar')\n"
        "    import easyjob.cli.calendar, easyjob.cli.stores\n"
    )
    found = _imported_after(code)
    assert "easyjob.store" in found
    assert not [m for m in found if m.startswith(("easyjob.node", "easyjob.web"))]
    assert _imported_after(code, ("easyjob.cli.commands", "easyjob.views.read")) == []


def test_every_public_name_loads() -> None:
    for name in easyjob.__all__:
        assert getattr(easyjob, name) is not None, name
    assert sorted(easyjob.__all__) == sorted([*easyjob._LAZY, "__version__"])
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        easyjob.nothing  # noqa: B018


def test_a_node_that_keeps_no_metrics_imports_no_prometheus_client(tmp_path: Path) -> None:
    """``prometheus_client`` (with the HTTP and URL modules it imports: about 60 ms of CPU,
    a tenth of ``easyjob run``'s start) is imported by a node that keeps metrics only."""
    code = (
        "    from easyjob.node.node import Node\n"
        "    from easyjob.store import Store\n"
        f"    store = Store.open('sqlite:///{tmp_path / 'm.db'}', create=True)\n"
        "    node = Node(store)\n"
        "    store.close()\n"
    )
    watched = ("prometheus_client", "easyjob.observe.prometheus", "easyjob.observe.endpoint")
    assert _imported_after(code, watched) == []
    measured = _imported_after(code.replace("Node(store)", "Node(store, metrics=True)"), watched)
    assert {"prometheus_client", "easyjob.observe.prometheus"} <= set(measured)
