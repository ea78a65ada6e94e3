"""The process executor: each run's call in a warm child process, so a crash or a kill
ends that run, not the node.

Children are started by a fork server (``multiprocessing``'s ``forkserver``: a small
single-threaded process started once, so the node's threads and locks are never forked)
that preloaded easyjob and the node's job modules (``set_forkserver_preload``): a child
starts in a few milliseconds, with nothing left to import. A child is reused for up to
:data:`RUNS_PER_CHILD` runs, one at a time, then replaced; a child that crashed or was
killed is replaced too. At most as many children wait idle as the node may need at once:
its workers on a node that calls its runs in children, one on a thread node (whose children
make only the rare recovered run). A run costs a round trip on a pipe (its :class:`JobCall` there,
its :class:`~easyjob.core.outcome.Outcome` back), and the call itself is the same
:func:`~easyjob.node.jobcall.invoke` as on a thread.

A child runs in a session of its own and ignores SIGINT and SIGTERM: Ctrl-C in a terminal,
or a stop signal sent to the node's process group, reaches the node, which stops its
children by its own shutdown rules (a grace for running jobs, then a kill). Setting a run's
cancellation flag (its timeout, or the end of that grace) kills its child at once. A child
whose node died exits by itself: it watches a pipe only the node holds open.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import signal
import threading
import weakref
from collections.abc import Iterable
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from easyjob.core.outcome import ERROR_LIMIT, Outcome
from easyjob.node.jobcall import CancelFlag, JobCall, invoke, resolve
from easyjob.threads import NamedThread, name_this_thread

__all__ = ["RUNS_PER_CHILD", "ProcessPool"]


#: Runs a child makes before it is replaced (a bound on what a leaking job can hold).
RUNS_PER_CHILD = 100

_context = multiprocessing.get_context("forkserver")
_preload_guard = threading.Lock()
_pools: weakref.WeakSet[ProcessPool] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """At exit, before ``multiprocessing`` joins its children (atexit runs handlers last
    registered first): children ignore the SIGTERM it sends, so they are killed here."""
    for pool in list(_pools):
        pool.close()


def preload(modules: Iterable[str]) -> None:
    """Have the fork server import *modules* (job modules, by name) before it forks a
    child; effective only before the fork server starts (the first child of the process)."""
    with _preload_guard:
        names = ["easyjob.node.isolation", *dict.fromkeys(m for m in modules if m != "__main__")]
        _context.set_forkserver_preload(names)


class _Child:
    """One warm child process and the node's ends of its pipes."""

    def __init__(self) -> None:
        self.conn, theirs = _context.Pipe(duplex=True)
        life_r, self._life = _context.Pipe(duplex=False)  # only the node writes (never)
        self.process: BaseProcess = _context.Process(
            target=_serve, args=(theirs, life_r), name="easyjob-child", daemon=True
        )
        self.process.start()
        theirs.close()
        life_r.close()
        self.runs = 0

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()

    def close(self) -> None:
        """Let the child exit (it does when its pipes close) and reap it."""
        self.conn.close()
        self._life.close()
        self.process.join(1.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


class ProcessPool:
    """Warm child processes, each making one call at a time (see the module docstring);
    at most *max_idle* of them wait idle, the others exit once their call returns."""

    def __init__(self, runs_per_child: int = RUNS_PER_CHILD, max_idle: int = 1) -> None:
        self._runs_per_child = runs_per_child
        self._max_idle = max_idle
        self._idle: list[_Child] = []
        self._all: weakref.WeakSet[_Child] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._closed = False
        _pools.add(self)

    def warm(self) -> None:
        """Start the fork server and one idle child now (not on a run's path)."""
        child = self._new()
        with self._lock:
            if not self._closed:
                self._idle.append(child)
                return
        child.close()

    def _new(self) -> _Child:
        child = _Child()
        with self._lock:
            self._all.add(child)
        return child

    def run(self, call: JobCall, cancelled: CancelFlag) -> Outcome:
        """Make *call* in a child and return how it ended; a child that died, or was killed
        because *cancelled* was set, ends the run as a failure saying so."""
        child = self._take()
        forget = cancelled.on_set(child.kill)
        try:
            child.conn.send(call)
            child.runs += 1
            wait([child.conn, child.process.sentinel])
            reply: tuple[str | None, str | None, Any, str | None] = child.conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            forget()
            child.close()
            self._replace()
            return Outcome(error=_died(child.process.exitcode, cancelled.is_set()))
        forget()
        error, traceback, result, note = reply
        self._give_back(child)
        return Outcome(error=error, traceback=traceback, result=result, note=note)

    def close(self) -> None:
        """Stop every child: the idle ones exit, a running one is killed (the node calls
        this once its shutdown grace is over)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            busy = [c for c in self._all if c not in idle]
        for child in busy:
            child.kill()
        for child in idle + busy:
            child.close()

    def _take(self) -> _Child:
        with self._lock:
            while self._idle:
                child = self._idle.pop()
                if child.process.is_alive():
                    return child
                child.close()
        return self._new()

    def _give_back(self, child: _Child) -> None:
        with self._lock:
            if self._closed or len(self._idle) >= self._max_idle:
                replace = False  # enough idle children (e.g. after a burst of recovered runs)
            elif child.runs < self._runs_per_child:
                self._idle.append(child)
                return
            else:
                replace = True
        # off the run's path: the outcome is reported while the child exits and a warm
        # replacement starts
        NamedThread("retire", self._retire, child, replace).start()

    def _replace(self) -> None:
        """Start a warm child in the background for one that died or was killed."""
        with self._lock:
            if self._closed:
                return
        NamedThread("warm", self.warm).start()

    def _retire(self, child: _Child, replace: bool) -> None:
        child.close()
        if replace:
            self.warm()


def _died(code: int | None, cancelled: bool) -> str:
    if cancelled:
        return "its process was killed: the run was cancelled (timeout or shutdown)"
    if code is not None and code < 0:
        return f"its process died of signal {-code} (a crash, or killed from outside)"
    return f"its process exited with code {code} before the job returned"


def _serve(conn: Connection, life: Connection) -> None:
    """In the child: make calls until the node closes the pipe."""
    os.setsid()  # out of the node's process group and terminal
    name_this_thread("child")  # ps tells a node's children from the node
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    NamedThread("lifeline", _watch, life).start()
    while True:
        try:
            call: JobCall = conn.recv()
        except EOFError:
            return
        outcome = _call(call)
        conn.send((outcome.error, outcome.traceback, outcome.result, outcome.note))


def _call(call: JobCall) -> Outcome:
    try:
        fn = resolve(call)
    except BaseException as err:
        where = f"{call.module}:{call.qualname}"
        text = f"cannot load {where} in the child: {type(err).__name__}: {err}"
        return Outcome(error=text[:ERROR_LIMIT])
    return invoke(call, fn, CancelFlag())


def _watch(life: Connection) -> None:
    """Exit the child once its node is gone (the pipe's only writer closed)."""
    with contextlib.suppress(EOFError, OSError):
        life.recv()
    os._exit(70)
