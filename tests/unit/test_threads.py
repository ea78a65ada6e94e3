"""Thread names for the operating system (:mod:`easyjob.threads`): what the kernel keeps of a
name, the names threads give themselves as they start, and the silent no-op where the
platform has no ``prctl``."""

from __future__ import annotations

import ast
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from easyjob import threads
from easyjob.threads import NamedThread, name_this_thread, os_name, worker_pool

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl: Linux")


def kernel_name(thread: threading.Thread | None = None) -> str:
    """What the kernel calls *thread* (the calling thread by default)."""
    tid = (thread or threading.current_thread()).native_id
    return Path(f"/proc/self/task/{tid}/comm").read_text().strip()


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        ("ej-loader", b"ej-loader"),
        ("ej-heartbeat", b"ej-heartbeat"),
        ("ej-worker-12345", b"ej-worker-12345"),  # 15 bytes: kept whole
        ("ej-worker-123456", b"ej-worke-123456"),  # the number kept, the role cut
        ("ej-dashboard-requests-7", b"ej-dashboard-7"),  # and no dash left dangling
        ("ej-dashboard-request-12", b"ej-dashboard-12"),
        ("ej-bench-scraper", b"ej-bench-scrape"),  # no number: the end cut
        ("ej-jöb-Ω", b"ej-j?b-?"),  # one ? per character, never a cut UTF-8 sequence
        ("ej-a\x00b\nc", b"ej-a?b?c"),  # nor a NUL ending it early
        ("x" * 20 + "-" + "9" * 20, b"x" * 15),  # a number longer than the limit: cut
        ("", b""),
    ],
)
def test_the_kernel_keeps_15_printable_ascii_bytes(name: str, kept: bytes) -> None:
    assert os_name(name) == kept


def test_long_worker_names_stay_distinct() -> None:
    names = {os_name(f"ej-a-very-long-role-{n}") for n in range(1, 200)}
    assert len(names) == 199 and all(len(name) == 15 for name in names)


def _names_seen(start: threading.Thread, seen: Sequence[object]) -> None:
    start.start()
    start.join(10)
    assert not start.is_alive() and len(seen) == 1


@linux
def test_a_named_thread_names_itself_for_the_kernel_as_it_starts() -> None:
    seen: list[tuple[str, str]] = []
    thread = NamedThread("loader", lambda a, b: seen.append((a + b, kernel_name())), "x", "y")
    assert thread.name == "ej-loader" and thread.daemon
    _names_seen(thread, seen)
    assert seen == [("xy", "ej-loader")]


@linux
def test_a_thread_easyjob_did_not_create_is_renamed_in_python_and_for_the_kernel() -> None:
    seen: list[tuple[str, str]] = []

    def body() -> None:
        name_this_thread("dashboard-requests-ünïcode-7")  # long and not ASCII: no error
        seen.append((threading.current_thread().name, kernel_name()))

    _names_seen(threading.Thread(target=body), seen)
    assert seen == [("ej-dashboard-requests-ünïcode-7", "ej-dashboard-7")]


@linux
def test_pool_workers_are_numbered_in_the_order_they_start() -> None:
    pool = worker_pool(3)
    gate = threading.Barrier(3, timeout=10)

    def names() -> tuple[str, str]:
        gate.wait()  # all three at once: each on a thread of its own
        return threading.current_thread().name, kernel_name()

    try:
        found = sorted(f.result(10) for f in [pool.submit(names) for _ in range(3)])
    finally:
        pool.shutdown()
    assert found == [(f"ej-worker-{n}", f"ej-worker-{n}") for n in (1, 2, 3)]


@pytest.mark.parametrize("platform", ["darwin", "win32", "freebsd14"])
def test_without_prctl_only_python_knows_the_name(
    monkeypatch: pytest.MonkeyPatch, platform: str
) -> None:
    monkeypatch.setattr(sys, "platform", platform)
    assert threads._prctl() is None
    monkeypatch.setattr(threads, "_set_name", None)
    seen: list[tuple[str, str | None]] = []
    before = kernel_name() if Path("/proc/self/task").exists() else None

    def body() -> None:
        name_this_thread("cancels-ünïcode-and-far-too-long")
        after = kernel_name() if before is not None else None
        seen.append((threading.current_thread().name, after))

    _names_seen(NamedThread("recovery", body), seen)
    # the kernel's name is the one a new thread inherits from the thread that started it
    assert seen == [("ej-cancels-ünïcode-and-far-too-long", before)]


def test_easyjob_starts_threads_only_through_this_module() -> None:
    """A thread made with ``threading.Thread`` or a ``ThreadPoolExecutor`` of its own would
    read ``python`` in ``top -H``: every one goes through :mod:`easyjob.threads`."""
    package = Path(threads.__file__).parent
    made = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "threads.py" and path.parent == package:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                called = ast.unparse(node.func).rsplit(".", 1)[-1]
                if called in ("Thread", "ThreadPoolExecutor", "Timer"):
                    made.append(f"{path.relative_to(package)}:{node.lineno}")
    assert made == []
