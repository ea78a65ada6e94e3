"""Running one job in a child process: a crash or a kill ends that run, not the node.

With ``--executor process`` each run's function is called in a fresh child process made
by a fork server (a small single-threaded process started once, so the node's own threads
and locks are never forked). The child imports the job's module as the node did and calls
the function; its outcome comes back over a pipe. The worker thread that waits for it
kills the child when the run's cancellation flag is set (its timeout, or the end of the
shutdown grace): a hard timeout, and no thread left stuck.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import multiprocessing
import sys
import threading
import traceback
from dataclasses import dataclass, field
from datetime import datetime
from multiprocessing.connection import Connection, wait
from typing import Any

from easyjob.context import TaskContext
from easyjob.logs import ContextLogger, run_context

__all__ = ["Call", "ChildFailed", "run_in_child"]

_MAX_ERROR = 4000
_POLL_S = 0.05


class ChildFailed(Exception):
    """The job failed in its child process; the message says how (its traceback, or how
    the process ended)."""


@dataclass(frozen=True)
class Call:
    """Everything the child needs to call the job (picklable)."""

    module: str
    file: str | None
    qualname: str
    takes_context: bool
    kwargs: dict[str, Any]
    task_name: str
    fire_time: datetime
    node_id: str
    attempt: int
    run_id: int
    sys_path: list[str] = field(default_factory=lambda: list(sys.path))


def run_in_child(call: Call, cancelled: threading.Event) -> None:
    """Call *call* in a child process and wait; raise ChildFailed unless it returned. Once
    *cancelled* is set the child is killed."""
    context = multiprocessing.get_context("forkserver")
    reader, writer = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(call, writer), name=f"easyjob-job-{call.run_id}")
    child.start()
    writer.close()
    try:
        while child.is_alive() and not cancelled.is_set():
            wait([child.sentinel], timeout=_POLL_S)
        if child.is_alive():
            child.kill()
            child.join()
            raise ChildFailed("its process was killed: the run was cancelled (timeout or shutdown)")
        child.join()
        try:
            error = reader.recv() if reader.poll() else _died(child.exitcode)
        except EOFError:  # the child died before it could answer
            error = _died(child.exitcode)
    finally:
        reader.close()
    if error is not None:
        raise ChildFailed(error)


def _died(code: int | None) -> str:
    if code is not None and code < 0:
        return f"its process died of signal {-code} (a crash, or killed from outside)"
    return f"its process exited with code {code} before the job returned"


def _child(call: Call, writer: Connection) -> None:
    """In the child: import the job, call it, send None or its traceback."""
    try:
        fn = _function(call)
        ctx = TaskContext(
            task_name=call.task_name,
            fire_time=call.fire_time,
            node_id=call.node_id,
            attempt=call.attempt,
            run_id=call.run_id,
            kwargs=dict(call.kwargs),
            logger=ContextLogger(
                logging.getLogger("easyjob.task"),
                {
                    "node_id": call.node_id,
                    **run_context(call.task_name, call.fire_time, call.run_id, call.attempt),
                },
            ),
        )
        if call.takes_context:
            fn(ctx, **call.kwargs)
        else:
            fn(**call.kwargs)
        writer.send(None)
    except BaseException as err:
        writer.send("".join(traceback.format_exception(err)).strip()[-_MAX_ERROR:])
    finally:
        writer.close()


def _function(call: Call) -> Any:
    sys.path[:0] = [p for p in call.sys_path if p not in sys.path]
    try:
        module = importlib.import_module(call.module)
    except ImportError:
        if call.file is None:
            raise
        spec = importlib.util.spec_from_file_location(call.module, call.file)
        if spec is None or spec.loader is None:
            raise
        module = importlib.util.module_from_spec(spec)
        sys.modules[call.module] = module
        spec.loader.exec_module(module)
    fn: Any = module
    for part in call.qualname.split("."):
        fn = getattr(fn, part)
    return fn
