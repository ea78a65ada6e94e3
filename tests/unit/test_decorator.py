"""@scheduled and the registry: validation at decoration time, parents, cycles."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from easyjob import CronError, Registry, TaskContext, TaskDefinitionError, scheduled
from easyjob.core.records import TaskSpec
from easyjob.core.states import Misfire, Overlap
from easyjob.errors import UnknownTimeZoneError

T = datetime(2030, 1, 1, tzinfo=UTC)


def job(ctx: TaskContext) -> None: ...


def plain() -> None: ...


def with_kwargs(ctx: TaskContext, *, n: int) -> None: ...


def other() -> None: ...


def test_defaults_and_name() -> None:
    registry = Registry()
    scheduled("*/5 * * * * *", registry=registry)(job)
    (spec,) = registry.resolved()
    assert spec.name == f"{__name__}.job" and spec.func == f"{__name__}:job"
    assert (spec.misfire, spec.overlap, spec.retries, spec.tz) == (
        Misfire.FIRE_ONCE,
        Overlap.SERIAL,
        0,
        "UTC",
    )
    entry = registry.get(spec.name)
    assert entry is not None and entry.takes_context


def test_policies_and_kwargs_are_kept() -> None:
    registry = Registry()
    scheduled(
        "0 * * * *",
        name="k",
        kwargs={"n": 3},
        retries=2,
        retry_delay=0.5,
        timeout=10,
        misfire="catch_up",
        overlap="allow",
        max_running=3,
        priority=-7,
        registry=registry,
    )(with_kwargs)
    (spec,) = registry.resolved()
    assert (spec.kwargs, spec.retries, spec.retry_delay, spec.timeout) == (
        {"n": 3},
        2,
        timedelta(seconds=0.5),
        timedelta(seconds=10),
    )
    assert (spec.misfire, spec.overlap) == (Misfire.CATCH_UP, Overlap.ALLOW)
    assert (spec.max_running, spec.priority) == (3, -7)
    assert (spec.columns()["max_running"], spec.columns()["priority"]) == (3, -7)
    entry = registry.get("k")
    assert entry is not None and entry.takes_context


def test_a_function_without_arguments_takes_no_context() -> None:
    registry = Registry()
    scheduled("@hourly", registry=registry)(plain)
    entry = registry.get(f"{__name__}.plain")
    assert entry is not None and not entry.takes_context


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"cron": "61 * * * *"},
            CronError,
            "@scheduled on tests.unit.test_decorator:plain: invalid cron expression '61 * * * *': "
            "minute field '61'",
        ),
        (
            {"cron": "@hourly", "tz": "Mars/Olympus"},
            UnknownTimeZoneError,
            "@scheduled on tests.unit.test_decorator:plain: unknown time zone 'Mars/Olympus'",
        ),
        (
            {"cron": "@hourly", "retries": -1},
            TaskDefinitionError,
            "retries must be an integer >= 0, got -1",
        ),
        (
            {"cron": "@hourly", "misfire": "sometimes"},
            TaskDefinitionError,
            "misfire must be one of 'fire_once', 'skip', 'catch_up', got 'sometimes'",
        ),
        (
            {"cron": "@hourly", "kwargs": {"when": object()}},
            TaskDefinitionError,
            "kwargs must be JSON",
        ),
        (
            {"cron": "@hourly", "kwargs": {"unknown": 1}},
            TaskDefinitionError,
            "must take no argument or one context argument",
        ),
        ({"every": "45x"}, TaskDefinitionError, "invalid interval '45x': expected a number"),
        ({"every": "45s", "cron": "* * * * *"}, TaskDefinitionError, "not both"),
        ({"max_runs": 3}, TaskDefinitionError, "max_runs need(s) a cron or an interval"),
        ({"every": "1m", "max_runs": 0}, TaskDefinitionError, "max_runs must be an integer >= 1"),
        ({"every": 10, "accepts": ["user id"]}, TaskDefinitionError, "invalid argument 'user id'"),
        ({"every": 10, "accepts": ["zzz"]}, TaskDefinitionError, "accepted trigger arguments"),
        (
            {"every": 10, "max_running": 0},
            TaskDefinitionError,
            "max_running must be None or an integer from 1 to 1000000, got 0",
        ),
        ({"every": 10, "max_running": True}, TaskDefinitionError, "max_running must be None"),
        ({"every": 10, "max_running": "2"}, TaskDefinitionError, "got '2'"),
        (
            {"every": 10, "priority": 1001},
            TaskDefinitionError,
            "priority must be an integer from -1000 to 1000, got 1001",
        ),
        ({"every": 10, "priority": 1.5}, TaskDefinitionError, "priority must be an integer"),
        (
            {"cron": "@hourly", "timeout": "soon"},
            TaskDefinitionError,
            "timeout must be seconds or a timedelta, got 'soon'",
        ),
    ],
)
def test_bad_definitions_fail_at_decoration_naming_the_function(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    registry = Registry()
    with pytest.raises(error) as info:
        scheduled(registry=registry, **kwargs)(plain)  # type: ignore[arg-type]
    assert message in str(info.value)
    assert len(registry) == 0


def test_parents_resolve_by_function_name_full_name_or_function() -> None:
    registry = Registry()
    scheduled("@hourly", registry=registry)(job)
    scheduled(parent="job", registry=registry)(plain)
    scheduled(parent=f"{__name__}.plain", registry=registry)(other)
    specs = {s.name: s for s in registry.resolved()}
    assert specs[f"{__name__}.plain"].parent == f"{__name__}.job"
    assert specs[f"{__name__}.other"].parent == f"{__name__}.plain"
    order = [s.name for s in registry.resolved()]
    assert order.index(f"{__name__}.job") < order.index(f"{__name__}.plain")


def test_unknown_parent_and_cycles_are_refused() -> None:
    registry = Registry()
    scheduled(parent="nowhere", registry=registry)(plain)
    with pytest.raises(TaskDefinitionError, match="unknown parent task 'nowhere'"):
        registry.resolved()
    cyclic = Registry()
    scheduled("@hourly", parent="other", registry=cyclic)(plain)
    scheduled(parent="plain", registry=cyclic)(other)
    with pytest.raises(TaskDefinitionError, match=r"task parents form a cycle: .*plain -> .*other"):
        cyclic.resolved()


def test_a_name_cannot_be_used_by_two_functions() -> None:
    registry = Registry()
    scheduled("@hourly", name="same", registry=registry)(plain)
    with pytest.raises(TaskDefinitionError, match="duplicate task name 'same'"):
        scheduled("@hourly", name="same", registry=registry)(other)


def test_a_cron_given_with_a_parent_is_checked_then_ignored() -> None:
    registry = Registry()
    scheduled("@hourly", registry=registry)(job)
    scheduled("0 0 * * * ?", parent="job", registry=registry)(plain)
    child = {s.name: s for s in registry.resolved()}[f"{__name__}.plain"]
    assert (child.cron, child.parent) == (None, f"{__name__}.job")
    with pytest.raises(CronError, match="invalid cron expression 'nope'"):
        scheduled("nope", parent="job", registry=registry)(other)


def test_scheduled_without_parentheses_is_scheduled_with_none() -> None:
    from easyjob.registry import default_registry

    default_registry.clear()
    try:
        assert scheduled(plain) is plain  # a manual-only task, as @scheduled() makes it
        (bare,) = default_registry.resolved()
        default_registry.clear()
        scheduled()(plain)
        (called,) = default_registry.resolved()
        assert bare == called and bare.cron is None and bare.every is None
    finally:
        default_registry.clear()


def test_a_module_that_defines_one_task_twice_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "twice.py"
    source.write_text(
        "from easyjob import Registry, scheduled\n"
        "registry = Registry()\n"
        "@scheduled('@hourly', registry=registry)\n"
        "def a(): pass\n"
        "@scheduled('@daily', registry=registry)\n"
        "def a(): pass\n"
    )
    with pytest.raises(TaskDefinitionError) as refused:
        exec(compile(source.read_text(), str(source), "exec"), {"__name__": "twice"})
    assert str(refused.value) == (
        "@scheduled on twice:a: duplicate task name 'twice.a': twice:a is defined twice in "
        f"{source} (lines 3 and 5); the second would silently replace the first"
    )


def test_defining_a_task_again_at_the_same_place_replaces_it() -> None:
    registry = Registry()
    code = "def again(): pass\n"
    first: dict[str, object] = {"__name__": "again_mod"}
    exec(compile(code, "again_mod.py", "exec"), first)
    second: dict[str, object] = {"__name__": "again_mod"}
    exec(compile(code, "again_mod.py", "exec"), second)  # a reload: same file and line
    scheduled("@hourly", registry=registry)(first["again"])
    scheduled("@daily", registry=registry)(second["again"])
    entry = registry.get("again_mod.again")
    assert entry is not None and entry.fn is second["again"] and entry.spec.cron == "@daily"


def test_executor_per_task_is_validated_and_kept() -> None:
    registry = Registry()
    scheduled("* * * * *", executor="process", registry=registry)(job)
    scheduled("* * * * *", registry=registry)(plain)
    assert registry.get(f"{__name__}.job").executor == "process"  # type: ignore[union-attr]
    assert registry.get(f"{__name__}.plain").executor is None  # type: ignore[union-attr]
    with pytest.raises(TaskDefinitionError) as err:
        scheduled("* * * * *", executor="fork", registry=Registry())(other)
    assert str(err.value) == (
        f"@scheduled on {__name__}:other: task '{__name__}.other': executor must be one of "
        "thread, process (or None: the node's --executor), got 'fork'"
    )


def second() -> None: ...


def third() -> None: ...


def test_a_child_of_several_parents_keeps_them_in_order_the_first_as_parent() -> None:
    registry = Registry()
    scheduled("0 * * * *", registry=registry)(job)
    scheduled("0 * * * *", registry=registry)(other)
    scheduled(parent=["job", other], registry=registry)(plain)
    specs = {s.name: s for s in registry.resolved()}
    child = specs[f"{__name__}.plain"]
    assert child.parents == (f"{__name__}.job", f"{__name__}.other")
    assert child.parent == f"{__name__}.job"
    order = [s.name for s in registry.resolved()]
    assert order.index(f"{__name__}.other") < order.index(f"{__name__}.plain")


def test_a_diamond_joins_on_its_root_whatever_the_root_is() -> None:
    registry = Registry()
    scheduled(registry=registry)(job)  # manual only: its triggers' times pass down
    scheduled(parent="job", registry=registry)(plain)
    scheduled(parent="job", registry=registry)(other)
    scheduled(parent=["plain", "other"], registry=registry)(second)
    (last,) = [s for s in registry.resolved() if s.name == f"{__name__}.second"]
    assert last.parents == (f"{__name__}.plain", f"{__name__}.other")


def test_parents_on_different_schedules_are_refused_naming_them() -> None:
    registry = Registry()
    scheduled("0 * * * *", registry=registry)(job)
    scheduled("*/5 * * * *", registry=registry)(other)
    scheduled(parent=["job", "other"], registry=registry)(plain)
    with pytest.raises(TaskDefinitionError) as info:
        registry.resolved()
    assert str(info.value).startswith(
        f"task '{__name__}.plain': its parents fire at different times "
        f"('{__name__}.job' after cron '0 * * * *' in UTC; "
        f"'{__name__}.other' after cron '*/5 * * * *' in UTC)"
    )


@pytest.mark.parametrize(
    ("first", "second_", "joins"),
    [
        ({"cron": "0 * * * *"}, {"cron": "0 * * * *"}, True),
        ({"cron": "0 * * * *"}, {"cron": "0 * * * *", "tz": "Asia/Kolkata"}, False),
        ({"every": 60, "start": T}, {"every": 60, "start": T}, True),
        ({"every": 60}, {"every": 60}, False),  # each anchored at its own registration
        ({"every": 60, "start": T}, {"every": 30, "start": T}, False),
        ({}, {}, False),  # two manual tasks: their triggers never share a time
    ],
)
def test_roots_must_share_one_schedule(
    first: dict[str, object], second_: dict[str, object], joins: bool
) -> None:
    registry = Registry()
    scheduled(registry=registry, **first)(job)  # type: ignore[arg-type]
    scheduled(registry=registry, **second_)(other)  # type: ignore[arg-type]
    scheduled(parent=["job", "other"], registry=registry)(plain)
    if joins:
        registry.resolved()
    else:
        with pytest.raises(TaskDefinitionError, match="its parents fire at different times"):
            registry.resolved()


def test_unknown_parents_and_cycles_of_a_join_are_refused_with_their_names() -> None:
    registry = Registry()
    scheduled("@hourly", registry=registry)(job)
    scheduled(parent=["job", "missing"], registry=registry)(plain)
    with pytest.raises(TaskDefinitionError, match=r"\.plain': unknown parent task 'missing'"):
        registry.resolved()
    cyclic = Registry()
    scheduled("@hourly", registry=cyclic)(job)
    scheduled(parent=["job", "third"], registry=cyclic)(second)
    scheduled(parent="second", registry=cyclic)(third)
    with pytest.raises(
        TaskDefinitionError,
        match=rf"task parents form a cycle: {__name__}.second -> {__name__}.third -> "
        rf"{__name__}.second",
    ):
        cyclic.resolved()
    itself = Registry()
    scheduled("@hourly", registry=itself)(job)
    scheduled(parent=["job", "plain"], registry=itself)(plain)
    with pytest.raises(TaskDefinitionError, match=rf"cycle: {__name__}.plain -> {__name__}.plain"):
        itself.resolved()


@pytest.mark.parametrize(
    ("parent", "message"),
    [
        ([], "parent must be a task name, a function, or a non-empty list of them, got []"),
        (["job", 3], "parent 3 in ['job', 3] is not a task name"),
        ({"job"}, "parent must be a task name, a function, or a non-empty list of them"),
        (["job", "job"], "parent(s) 'job' given more than once"),
    ],
)
def test_a_bad_parent_list_is_refused_at_decoration(parent: object, message: str) -> None:
    registry = Registry()
    with pytest.raises(TaskDefinitionError) as info:
        scheduled(parent=parent, registry=registry)(plain)  # type: ignore[arg-type]
    assert message in str(info.value) and f"@scheduled on {__name__}:plain" in str(info.value)
    assert len(registry) == 0


def test_the_same_parent_named_two_ways_is_refused_once_resolved() -> None:
    registry = Registry()
    scheduled("@hourly", registry=registry)(job)
    scheduled(parent=["job", job], registry=registry)(plain)
    with pytest.raises(TaskDefinitionError, match=rf"parent\(s\) '{__name__}.job' given more"):
        registry.resolved()


def test_tasks_without_kwargs_share_one_empty_mapping_and_kwargs_stay_their_own() -> None:
    """A task without kwargs holds no dict of its own (64 B a task: issue 25's large
    catalogues); one with kwargs holds a copy, untouched by later changes to the caller's."""
    registry = Registry()
    scheduled("@hourly", registry=registry)(job)
    scheduled("@daily", registry=registry)(plain)
    given = {"n": 1}
    scheduled("@hourly", registry=registry, kwargs=given)(with_kwargs)
    given["n"] = 2
    specs = {spec.func.rsplit(":", 1)[1]: spec for spec in registry.resolved()}
    assert specs["job"].kwargs == {} and specs["job"].kwargs is specs["plain"].kwargs
    assert specs["with_kwargs"].kwargs == {"n": 1}


def test_settings_validated_once_are_still_checked_for_each_task() -> None:
    """Tasks declared alike validate their settings once (issue 25: 100,000 decorations);
    each still gets its own name check, its settings normalised as the first's were, and a
    setting equal to a valid one but of another type (``True`` for ``1``) is refused."""
    first = TaskSpec(name="a", func="m:a", cron="@hourly", retries=1, accepts=("x",), every=None)
    again = TaskSpec(name="b", func="m:b", cron="@hourly", retries=1, accepts=("x",), every=None)
    assert (again.misfire, again.overlap, again.accepts) == (
        first.misfire,
        first.overlap,
        first.accepts,
    )
    assert isinstance(again.misfire, Misfire) and again.kwargs is first.kwargs
    with pytest.raises(TaskDefinitionError, match="invalid task name"):
        TaskSpec(name="", func="m:c", cron="@hourly", retries=1, accepts=("x",))
    with pytest.raises(TaskDefinitionError, match="invalid function path"):
        TaskSpec(name="d", func="", cron="@hourly", retries=1, accepts=("x",))
    with pytest.raises(TaskDefinitionError, match="retries must be an integer"):
        TaskSpec(name="e", func="m:e", cron="@hourly", retries=True, accepts=("x",))
    with pytest.raises(TaskDefinitionError, match="broadcast must be True or False"):
        TaskSpec(name="f", func="m:f", cron="@hourly", retries=1, accepts=("x",), broadcast=0)
    every = TaskSpec(name="g", func="m:g", every="90s")  # type: ignore[arg-type]
    alike = TaskSpec(name="h", func="m:h", every="90s")  # type: ignore[arg-type]
    assert every.every == alike.every == timedelta(seconds=90)
