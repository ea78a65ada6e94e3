"""What an operator may do from the dashboard, each through the control functions the CLI
uses (:mod:`easyjob.control`): no action writes a run row in a way of its own.

Each action reads its form, acts, and returns what it touched and a message for the page
and the audit log; bad input raises ValueError or an :class:`~easyjob.errors.EasyJobError`
naming what is wrong (shown to the operator and recorded as ``refused``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from easyjob import control
from easyjob.core.inputs import parse_kwargs, parse_time
from easyjob.errors import ConfigError, shown
from easyjob.store.contract import Store
from easyjob.views import cancel_text

__all__ = ["ACTIONS", "Done", "Form"]

Form = Mapping[str, list[str]]


@dataclass(frozen=True)
class Done:
    """An action that worked: what it *target*-ed and what to tell the operator."""

    target: str
    message: str


def _text(form: Form, name: str, *, required: bool = False) -> str | None:
    values = form.get(name) or [""]
    value = values[0].strip()
    if not value:
        if required:
            raise ConfigError(f"the form needs a {name}")
        return None
    return value


def _name(form: Form, field: str = "task") -> str:
    name = _text(form, field, required=True)
    assert name is not None
    return name


def _flag(form: Form, name: str) -> bool:
    return _text(form, name) in ("1", "on", "true", "yes")


def trigger(store: Store, form: Form) -> Done:
    """``task``, optional ``kwargs`` (a JSON object) and ``at`` (ISO 8601; no zone: UTC)."""
    name = _name(form)
    kwargs_text = _text(form, "kwargs")
    at_text = _text(form, "at")
    kwargs = parse_kwargs(kwargs_text, "kwargs") if kwargs_text else None
    at = parse_time(at_text) if at_text else None
    run_id = control.trigger(store, name, at=at, kwargs=kwargs)
    when = f" at {at.isoformat()}" if at else " now"
    return Done(name, f"triggered {name}{when}: run {run_id}")


def pause(store: Store, form: Form) -> Done:
    """``task``."""
    task = control.pause(store, _name(form))
    return Done(task.name, f"{task.name} is {task.status.value}")


def resume(store: Store, form: Form) -> Done:
    """``task``."""
    task = control.resume(store, _name(form))
    return Done(task.name, f"{task.name} is {task.status.value}")


#: Run ids are 64-bit signed integers in every backend's table.
_MAX_RUN_ID = 2**63 - 1


def _run_id(form: Form) -> int:
    text = _name(form, "run")
    digits = text.isascii() and text.isdigit() and len(text) <= 19
    if not digits or not 0 < int(text) <= _MAX_RUN_ID:
        raise ConfigError(f"invalid run id {shown(text)}: a whole number from 1 to {_MAX_RUN_ID}")
    return int(text)


def rerun(store: Store, form: Form) -> Done:
    """``run``: the id of a run to run again (a new manual run with its arguments)."""
    old = _run_id(form)
    run_id = control.rerun(store, old)
    return Done(f"run {old}", f"run {old} runs again as run {run_id}")


def cancel(store: Store, form: Form) -> Done:
    """``run``: the id of a run to cancel (PENDING, CLAIMED or RUNNING); one that had
    ended is refused, naming how it ended."""
    found = control.cancel(store, _run_id(form))
    if not found.cancelled:
        raise ConfigError(cancel_text(found))
    return Done(f"run {found.run_id}", cancel_text(found))


def schedule_add(store: Store, form: Form) -> Done:
    """``task``, ``func``, ``cron`` or ``every``, ``tz``, ``force``."""
    row = control.add_schedule(
        store,
        _name(form),
        _name(form, "func"),
        cron=_text(form, "cron"),
        every=_text(form, "every"),
        tz=_text(form, "tz") or "UTC",
        force=_flag(form, "force"),
    )
    return Done(row.name, f"added {row.name} calling {row.func}")


def schedule_set(store: Store, form: Form) -> Done:
    """``task``, ``cron`` or ``every``, ``tz``, ``force``."""
    row = control.set_schedule(
        store,
        _name(form),
        cron=_text(form, "cron"),
        every=_text(form, "every"),
        tz=_text(form, "tz"),
        force=_flag(form, "force"),
    )
    return Done(row.name, f"changed the schedule of {row.name}")


def schedule_remove(store: Store, form: Form) -> Done:
    """``task`` (added at run time)."""
    row = control.remove_schedule(store, _name(form))
    return Done(row.name, f"removed {row.name}: it is {row.status.value}")


#: The actions by the name in their URL (``POST /act/NAME``).
ACTIONS: dict[str, Callable[[Store, Form], Done]] = {
    "trigger": trigger,
    "pause": pause,
    "resume": resume,
    "rerun": rerun,
    "cancel": cancel,
    "schedule-add": schedule_add,
    "schedule-set": schedule_set,
    "schedule-remove": schedule_remove,
}
