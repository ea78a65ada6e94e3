"""Which children of several parents can ever run: their parents must fire at the same times.

A child of several parents (``parent=["a", "b"]``) runs once per fire time for which every
parent succeeded; a chain passes its root's fire time down to each child. So the parents'
fire times can only meet when their roots fire at the same times: the same task, or roots
with the same schedule (the same cron expression in the same zone, or the same interval from
the same ``start=``). Anything else is refused when the code declares it, naming the
parents and their roots: the child would otherwise never run, and say nothing (pure).
"""

from __future__ import annotations

from collections.abc import Sequence

from easyjob.core.records import TaskSpec
from easyjob.errors import TaskDefinitionError

__all__ = ["check_joins", "root_keys"]

#: What a root's fire times are determined by: a schedule, or (no schedule that fixes them
#: in advance: only triggers, or an interval anchored at its registration) the task itself.
RootKey = tuple[str, ...]


def root_keys(ordered: Sequence[TaskSpec]) -> dict[str, frozenset[RootKey]]:
    """For each task of *ordered* (parents before children, parents resolved to names), the
    keys of the roots its fire times come from."""
    keys: dict[str, frozenset[RootKey]] = {}
    for spec in ordered:
        if spec.parents:
            keys[spec.name] = frozenset().union(*(keys.get(p, frozenset()) for p in spec.parents))
        else:
            keys[spec.name] = frozenset({_key(spec)})
    return keys


def check_joins(ordered: Sequence[TaskSpec]) -> None:
    """Refuse a child of several parents whose parents' roots fire at different times
    (TaskDefinitionError naming the child, each parent and its roots)."""
    keys = root_keys(ordered)
    for spec in ordered:
        if len(spec.parents) < 2 or len(keys[spec.name]) <= 1:
            continue
        roots = "; ".join(f"{p!r} {_shown(keys[p])}" for p in spec.parents)
        raise TaskDefinitionError(
            f"task {spec.name!r}: its parents fire at different times ({roots}), so no fire "
            "time would ever have a success of each and the child would never run. A child "
            "of several parents joins on the fire time its chain passes down from its root: "
            "give the parents one root task, or roots with the same cron and tz (or the "
            "same every= and start=)"
        )


def _key(root: TaskSpec) -> RootKey:
    if root.cron is not None:
        return ("cron", root.cron_text or root.cron, root.tz)
    if root.every is not None:  # without start=, anchored at its own registration
        start = root.start.isoformat() if root.start is not None else f"registration:{root.name}"
        return ("every", str(root.every_ms), start)
    return ("task", root.name)


def _shown(keys: frozenset[RootKey]) -> str:
    return "after " + ", ".join(sorted(_text(key) for key in keys))


def _text(key: RootKey) -> str:
    kind, *rest = key
    if kind == "cron":
        return f"cron {rest[0]!r} in {rest[1]}"
    if kind == "every":
        since = rest[1]
        if since.startswith("registration:"):
            since = f"the registration of {since.removeprefix('registration:')!r} (no start=)"
        return f"every {int(rest[0]) / 1000:g}s from {since}"
    return f"the fires of task {rest[0]!r}"
