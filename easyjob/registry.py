"""The tasks this process's code declares: specs plus the functions that run them.

A node only runs functions registered here by its own code; the database holds import paths
and JSON arguments, never code.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import FunctionType, MappingProxyType
from typing import Any

from easyjob.core.config import EXECUTORS
from easyjob.core.joins import check_joins
from easyjob.core.records import TaskSpec
from easyjob.errors import TaskDefinitionError
from easyjob.events import EventKind, Hook

__all__ = ["ParentRef", "Registered", "Registry", "default_registry", "func_path"]

#: A parent task: its name (or a function name in the same module), or its function.
ParentRef = str | Callable[..., Any]


def func_path(fn: Callable[..., Any]) -> str:
    """``module:qualname``, the import path stored in ``easy_job_task.func``."""
    return f"{fn.__module__}:{fn.__qualname__}"


#: The hooks of a task that has none: one shared empty mapping, not a dict per task.
NO_HOOKS: Mapping[EventKind, Hook] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Registered:
    """A task (or a ``@runnable`` function) as this process's code declared it: its spec,
    its function, whether that takes a context, its event hooks, and where its runs are
    called (``thread`` or ``process``; None: the node's ``--executor``).

    Kept compact (slots, shared empty hooks): a node may declare 100,000 tasks, and each
    costs what its spec and this record hold (docs/performance.md). A new per-task setting
    belongs in :class:`~easyjob.core.records.TaskSpec` (stored in the task row); one that
    only this process needs (like *executor*) is a field here with a default."""

    spec: TaskSpec
    fn: Callable[..., Any]
    takes_context: bool
    hooks: Mapping[EventKind, Hook] = field(default_factory=lambda: NO_HOOKS)
    executor: str | None = None


class Registry:
    """Tasks by name. Parents are references (a task name, a function name in the same
    module, or a function) resolved by :meth:`resolved` once every module is imported.

    A node reads its registry once, when it starts: from then until it stops, adding a task
    is an error naming the function (a task added later would silently never run)."""

    def __init__(self) -> None:
        self._tasks: dict[str, Registered] = {}
        self._parents: dict[str, list[ParentRef]] = {}
        self._runnable: dict[str, Registered] = {}
        self._readers: set[str] = set()
        self._guard = threading.Lock()

    def allow(self, fn: Callable[..., Any], accepts: tuple[str, ...] = ()) -> None:
        """Let schedules added at run time (``easyjob schedule add``) call *fn*, passing
        only the trigger arguments in *accepts*. See ``@runnable``."""
        path = func_path(fn)
        spec = TaskSpec(name=path, func=path, accepts=accepts)
        self._runnable[path] = Registered(spec, fn, _takes_context(fn, spec))

    def runnable(self) -> dict[str, Registered]:
        """The functions schedules added at run time may call, by import path."""
        return dict(self._runnable)

    def add(
        self,
        fn: Callable[..., Any],
        spec: TaskSpec,
        parent: ParentRef | Sequence[ParentRef] | None = None,
        hooks: Mapping[EventKind, Hook] | None = None,
        executor: str | None = None,
    ) -> None:
        """Register *fn* as the task *spec*, after *parent* (one reference or a list of
        them, resolved by :meth:`resolved`); *executor* (``thread``, ``process`` or None:
        the node's) says where its runs are called."""
        if executor is not None and executor not in EXECUTORS:
            raise TaskDefinitionError(
                f"task {spec.name!r}: executor must be one of {', '.join(EXECUTORS)} (or None: "
                f"the node's --executor), got {executor!r}"
            )
        with self._guard:
            if self._readers:
                nodes = ", ".join(sorted(self._readers))
                raise TaskDefinitionError(
                    f"task {spec.name!r} ({spec.func}) added after node {nodes} started with "
                    "this registry: it would never run there. Define tasks before "
                    "Node.start() (import their modules first), or stop the node first"
                )
            self._add(fn, spec, parent, hooks, executor)

    def _add(
        self,
        fn: Callable[..., Any],
        spec: TaskSpec,
        parent: ParentRef | Sequence[ParentRef] | None,
        hooks: Mapping[EventKind, Hook] | None,
        executor: str | None,
    ) -> None:
        existing = self._tasks.get(spec.name)
        if existing is not None and existing.spec.func != spec.func:
            raise TaskDefinitionError(
                f"duplicate task name {spec.name!r}: used by {existing.spec.func} and {spec.func}"
            )
        if existing is not None and _where(existing.fn) != _where(fn):
            # the same import path from another definition: a second `def` of the name in
            # one module (a re-import or reload defines it at the same place again)
            (file, first), (_, second) = _where(existing.fn), _where(fn)
            raise TaskDefinitionError(
                f"duplicate task name {spec.name!r}: {spec.func} is defined twice in {file} "
                f"(lines {first} and {second}); the second would silently replace the first"
            )
        self._tasks[spec.name] = Registered(
            spec, fn, _takes_context(fn, spec), dict(hooks) if hooks else NO_HOOKS, executor
        )
        refs = [parent] if isinstance(parent, str) or callable(parent) else list(parent or ())
        if refs:
            self._parents[spec.name] = refs

    def __len__(self) -> int:
        return len(self._tasks)

    def names(self) -> list[str]:
        return list(self._tasks)

    def tasks(self) -> dict[str, Registered]:
        """Every task, by name (a copy)."""
        return dict(self._tasks)

    def get(self, name: str) -> Registered | None:
        return self._tasks.get(name)

    def by_func(self) -> dict[str, Registered]:
        return {r.spec.func: r for r in self._tasks.values()}

    def clear(self) -> None:
        """Forget every task (and every node that read the registry)."""
        with self._guard:
            self._tasks.clear()
            self._parents.clear()
            self._runnable.clear()
            self._readers.clear()

    def read_by(self, node_id: str) -> None:
        """Node *node_id* read this registry to start: refuse additions until
        :meth:`released_by`."""
        with self._guard:
            self._readers.add(node_id)

    def released_by(self, node_id: str) -> None:
        """Node *node_id* stopped: it no longer needs this registry fixed."""
        with self._guard:
            self._readers.discard(node_id)

    def resolved(self) -> list[TaskSpec]:
        """Every spec with its parents resolved to task names, parents before children.

        Raises TaskDefinitionError for an unknown parent, a cycle, or a child of several
        parents whose roots fire at different times (see :mod:`easyjob.core.joins`)."""
        if not self._parents:  # no task has a parent: the specs as declared
            return [entry.spec for entry in self._tasks.values()]
        specs = {}
        for name, entry in self._tasks.items():
            parents = tuple(self._resolve(entry, ref) for ref in self._parents.get(name, ()))
            specs[name] = (
                replace(entry.spec, parent=None, parents=parents)
                if parents != entry.spec.parents
                else entry.spec
            )
        ordered = _parents_first(specs)
        check_joins(ordered)
        return ordered

    def _resolve(self, entry: Registered, ref: ParentRef) -> str:
        if callable(ref):
            path = func_path(ref)
            for name, other in self._tasks.items():
                if other.spec.func == path:
                    return name
            raise TaskDefinitionError(
                f"task {entry.spec.name!r}: parent function {path} is not a @scheduled task"
            )
        module = entry.fn.__module__
        for candidate in (ref, f"{module}.{ref}"):
            if candidate in self._tasks:
                return candidate
        for name, other in self._tasks.items():
            if other.spec.func in (f"{module}:{ref}", ref.replace(":", ".")) or (
                other.spec.func.replace(":", ".") == ref
            ):
                return name
        raise TaskDefinitionError(f"task {entry.spec.name!r}: unknown parent task {ref!r}")


def _parents_first(specs: Mapping[str, TaskSpec]) -> list[TaskSpec]:
    """*specs* ordered parents before children; TaskDefinitionError naming a cycle."""
    ordered: list[TaskSpec] = []
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "visiting":
            cycle = " -> ".join([*path[path.index(name) :], name])
            raise TaskDefinitionError(f"task parents form a cycle: {cycle}")
        state[name] = "visiting"
        for parent in specs[name].parents:
            if parent in specs:
                visit(parent, [*path, name])
        state[name] = "done"
        ordered.append(specs[name])

    for name in specs:
        visit(name, [])
    return ordered


def _where(fn: Callable[..., Any]) -> tuple[str, int]:
    """Where *fn* is defined: its source file and first line (the decorator's, if any)."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is None:
        return ("?", 0)
    return (code.co_filename, code.co_firstlineno)


def _takes_context(fn: Callable[..., Any], spec: TaskSpec) -> bool:
    """Whether *fn* takes a context argument; TaskDefinitionError naming the task when it
    cannot be called with none or one plus its kwargs and accepted trigger arguments."""
    simple = _plain_takes_context(fn) if not spec.kwargs and not spec.accepts else None
    return simple if simple is not None else _inspected_takes_context(fn, spec)


_GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR


def _plain_takes_context(fn: Callable[..., Any]) -> bool | None:
    """The answer of :func:`_inspected_takes_context` read from the code object of a plain
    function given no kwargs and no accepted arguments, or None when it needs the full
    inspection (anything else, or a function it would refuse: the message comes from
    there). ``inspect.signature`` costs about 20 us a task; this about 1."""
    if (
        type(fn) is not FunctionType
        or "__wrapped__" in fn.__dict__
        or "__signature__" in (fn.__dict__)
    ):
        return None
    code = fn.__code__
    if code.co_flags & _GENERATOR_FLAGS:
        return None
    required_kwonly = code.co_kwonlyargcount - len(fn.__kwdefaults__ or ())
    required = code.co_argcount - len(fn.__defaults__ or ())
    if required_kwonly > 0 or required > 1:
        return None  # refused: inspection says why
    return code.co_argcount > 0


def _inspected_takes_context(fn: Callable[..., Any], spec: TaskSpec) -> bool:
    if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        kind = "an async generator" if inspect.isasyncgenfunction(fn) else "a generator"
        raise TaskDefinitionError(
            f"task {spec.name!r}: {spec.func} is {kind} function; calling it would not run "
            "its body: use a plain or an async def function"
        )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as err:
        raise TaskDefinitionError(f"task {spec.name!r}: cannot inspect {fn!r}: {err}") from err
    positional = [
        p
        for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in spec.kwargs
    ]
    positional = [p for p in positional if p.name not in spec.accepts]
    takes_context = bool(positional)
    args: list[Any] = [None] if takes_context else []
    try:
        signature.bind(*args, **{**spec.kwargs, **dict.fromkeys(spec.accepts)})
    except TypeError as err:
        given = sorted({*spec.kwargs, *spec.accepts})
        raise TaskDefinitionError(
            f"task {spec.name!r}: {spec.func} must take no argument or one context argument, "
            f"plus its kwargs and accepted trigger arguments {given}: {err}"
        ) from err
    return takes_context


default_registry = Registry()
