"""The SQLite write gate: one writer at a time across processes, a bounded wait with a clear
error, released by the kernel when its holder dies."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from easyjob.errors import DatabaseUnavailableError
from easyjob.store.gate import WriteGate


def _gate(tmp_path: Path, timeout_s: float = 5.0) -> WriteGate:
    gate = WriteGate.for_url(sa.make_url(f"sqlite:///{tmp_path / 'x.db'}"), timeout_s)
    assert gate is not None
    return gate


def test_only_sqlite_files_have_a_gate(tmp_path: Path) -> None:
    assert WriteGate.for_url(sa.make_url("sqlite://"), 1) is None
    assert WriteGate.for_url(sa.make_url("sqlite:///:memory:"), 1) is None
    assert WriteGate.for_url(sa.make_url("postgresql+psycopg://u@h/d"), 1) is None
    assert _gate(tmp_path).path == f"{tmp_path / 'x.db'}-easyjob-gate"


def _write_turns(root: str, name: str, turns: int) -> None:
    gate = _gate(Path(root))
    log = Path(root) / "turns.log"
    for _ in range(turns):
        with gate.held():
            with log.open("a") as f:
                f.write(f"{name} in\n")
            time.sleep(0.001)
            with log.open("a") as f:
                f.write(f"{name} out\n")
    gate.close()


def test_processes_take_turns(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_turns, args=(str(tmp_path), f"p{i}", 50)) for i in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    lines = (tmp_path / "turns.log").read_text().splitlines()
    assert len(lines) == 3 * 50 * 2
    for enter, leave in zip(lines[::2], lines[1::2], strict=True):
        assert enter.endswith(" in") and leave == enter.replace(" in", " out")


def _hold_forever(root: str) -> None:
    gate = _gate(Path(root))
    with gate.held():
        (Path(root) / "held").touch()
        time.sleep(600)


def test_a_held_gate_times_out_naming_it_and_a_dead_holder_frees_it(tmp_path: Path) -> None:
    proc = multiprocessing.get_context("spawn").Process(target=_hold_forever, args=(str(tmp_path),))
    proc.start()
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "held").exists():
            assert time.monotonic() < deadline and proc.is_alive()
            time.sleep(0.01)
        gate = _gate(tmp_path, timeout_s=0.2)
        with pytest.raises(DatabaseUnavailableError, match="easyjob-gate"), gate.held():
            pass
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(10)
        with gate.held():  # the kernel dropped the dead holder's lock
            pass
        gate.close()
    finally:
        proc.kill()
        proc.join(10)
