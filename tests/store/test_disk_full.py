"""SQLite on a small volume: a full disk passes once space returns (docs/reliability.md,
"SQLite and a full disk"). Real file systems: a 2 MiB tmpfs, mounted for the test (root)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from easyjob.store import RetryPolicy
from easyjob.store.database import Database
from easyjob.store.dialects.sqlite import WAL_SIZE_LIMIT
from easyjob.store.retry import error_kind

#: 16 rows of 2 KiB rewritten per transaction: the data stays small, the WAL grows fast.
ROWS, BODY = 16, 2048


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of *size* mounted at *path*; skips (naming why) where mounting is refused."""
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a {size} tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path) -> int:
    """Write zeros to *path* until the file system is full; return the bytes written."""
    written = 0
    with path.open("wb", buffering=0) as out:
        for size in (65536, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    written += out.write(b"\0" * size)
    return written


def _churn(db: Database, rounds: int, start: int = 0) -> None:
    update = sa.text("UPDATE churn SET body = :body WHERE id = :id")
    for i in range(start, start + rounds):
        body = f"{i:08d}" * (BODY // 8)
        db.write(
            "churn",
            lambda c, b=body: c.execute(update, [{"body": b, "id": r} for r in range(ROWS)]),
        )


def test_sqlite_writes_again_once_a_full_small_disk_has_room(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk", "2m") as disk:
        wal = disk / "easyjob.db-wal"
        db = Database.open(f"sqlite:///{disk}/easyjob.db", retry=RetryPolicy(deadline_s=0))
        try:
            insert = sa.text("INSERT INTO churn (id, body) VALUES (:id, '')")
            db.write(
                "create",
                lambda c: c.exec_driver_sql(
                    "CREATE TABLE churn (id INTEGER PRIMARY KEY, body TEXT)"
                ),
            )
            db.write("rows", lambda c: c.execute(insert, [{"id": r} for r in range(ROWS)]))
            _churn(db, 5)
            filler = disk / "filler"
            fill(filler)
            with pytest.raises(sa.exc.OperationalError) as full:
                _churn(db, 200)  # the WAL cannot grow: within a few writes one fails
            assert error_kind(full.value) == "resources", repr(full.value)
            at_full = wal.stat().st_size
            filler.unlink()
            _churn(db, 1)
            # the first write after the disk full folded the WAL into the file and emptied
            # it: what is left is that one write's frames
            assert wal.stat().st_size < min(at_full, 128 * 1024), (at_full, wal.stat().st_size)
            _churn(db, 400, start=1)  # ~13 MiB of WAL frames through a 2 MiB volume
            assert wal.stat().st_size <= WAL_SIZE_LIMIT + 64 * 1024, wal.stat().st_size
            rows = db.read("rows", lambda c: c.exec_driver_sql("SELECT body FROM churn").all())
            assert {r[0][:8] for r in rows} == {"00000400"}
        finally:
            db.dispose()
