"""The threads easyjob starts, named for the operating system as well as for Python.

Python 3.11 keeps a thread's name to itself: ``top -H``, ``ps -L``, ``/proc/PID/task/*/comm``
and profilers that read the kernel's names show every thread of a node as ``python``. Every
thread easyjob starts is named ``ej-ROLE`` (``ej-loader``, ``ej-worker-3``): in Python
(``threading.current_thread().name``, log records' ``threadName``) and, as it starts, for the
kernel too (``prctl(PR_SET_NAME)`` on Linux; nothing elsewhere). The kernel keeps 15 bytes
of ASCII: :func:`os_name` says what a name becomes there.
"""

from __future__ import annotations

import ctypes
import itertools
import re
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

__all__ = ["PREFIX", "NamedThread", "name_this_thread", "os_name", "thread_name", "worker_pool"]

#: What every easyjob thread's name starts with (short: the kernel keeps 15 bytes).
PREFIX = "ej-"

_LIMIT = 15  # TASK_COMM_LEN less its NUL
_PR_SET_NAME = 15
_NUMBER = re.compile(r"[-_]?\d+$")
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")


def thread_name(role: str) -> str:
    """The Python name of the thread that has *role*: ``ej-ROLE``."""
    return PREFIX + role


def os_name(name: str) -> bytes:
    """*name* as the kernel keeps it: printable ASCII (anything else becomes ``?``), 15
    bytes at most, cut before a trailing number (``-12``, which tells worker threads
    apart), which is kept."""
    text = _UNPRINTABLE.sub("?", name)
    if len(text) > _LIMIT:
        number = _NUMBER.search(text)
        tail = number.group() if number and len(number.group()) < _LIMIT else ""
        text = text[: _LIMIT - len(tail)].rstrip("-_") + tail
    return text.encode("ascii")


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # no C library to ask, or one without prctl
        return None
    return fn


_set_name = _prctl()


def _name_for_os(name: str) -> None:
    if _set_name is not None:
        # a refusal (-1) leaves the kernel's name as it was: nothing worth failing a thread for
        _set_name(_PR_SET_NAME, ctypes.c_char_p(os_name(name)), 0, 0, 0)


def name_this_thread(role: str) -> None:
    """Name the calling thread ``ej-ROLE`` in Python and for the operating system (see
    :func:`os_name`; a silent no-op for the latter where there is no ``prctl``), for a
    thread easyjob did not create itself (a pool's, a server's, a child process's main
    thread). Never raises for a long or non-ASCII name."""
    name = thread_name(role)
    threading.current_thread().name = name
    _name_for_os(name)


class NamedThread(threading.Thread):
    """A daemon thread named ``ej-ROLE`` (:func:`thread_name`) that gives the operating
    system its name first thing when it runs, then calls ``target(*args)``."""

    def __init__(self, role: str, target: Callable[..., object], *args: object) -> None:
        super().__init__(target=target, args=args, name=thread_name(role), daemon=True)

    def run(self) -> None:
        _name_for_os(self.name)
        super().run()


def worker_pool(workers: int, role: str = "worker") -> ThreadPoolExecutor:
    """A pool of at most *workers* threads named ``ej-ROLE-1``, ``ej-ROLE-2`` ... in the
    order they start, in Python and for the operating system."""
    numbers = itertools.count(1)  # next() on it is atomic under the GIL
    return ThreadPoolExecutor(
        workers,
        thread_name_prefix=thread_name(role),
        initializer=lambda: name_this_thread(f"{role}-{next(numbers)}"),
    )
