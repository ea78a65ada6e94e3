"""Batch statements render a bounded number of SQL texts, whatever the batch size.

Drivers cache by text (psycopg prepares a query it has seen a few times, and skips its own
cache for texts over 4,096 bytes; SQLite's statement cache is keyed by text), so a statement
whose text changes with every batch size is parsed every time. Each test below drives batches
of 1 to 201 rows through one transition while recording every text the engine sends, groups
the texts into kinds (the text with each run of placeholders collapsed) and asserts: one text
per kind on PostgreSQL (arrays) and SQLite (JSON arrays), at most log2(batch) + 1 per kind on
MySQL/MariaDB (lists padded to a power of two); and that each batch won exactly the rows still
at the version it named.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from easyjob.core.records import Advance, Candidate, PlannedFire, Run, TaskSpec
from easyjob.core.states import RunStatus
from easyjob.core.store_values import BLOCKED
from easyjob.store import Store

#: Batch sizes: every size to 16, then around the powers of two up to a node's default batch.
SIZES = [*range(1, 17), 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 200]
TASKS = 200
#: Texts a kind may have: one per power of two up to the largest batch (a stale token added).
PADDED_BOUND = max(SIZES).bit_length() + 1

_PLACEHOLDER = re.compile(r"%\(\w+\)s(::[\w \[\]]+)?|%s|\?")
_RUN_OF_TUPLES = re.compile(r"\(\?(, \?)*\)(, \(\?(, \?)*\))+")
_RUN_OF_SCALARS = re.compile(r"\?(, \?)+")
#: A CASE with a WHEN per distinct value (the store's shape before arrays and lookups).
_RUN_OF_WHENS = re.compile(r"(WHEN \([\w.]+ IN \(\?\*?\)\) THEN \? )+")


def kind_of(statement: str) -> str:
    """*statement* with every placeholder as ``?`` and every run of them (or of CASE
    branches) as one: the texts of one statement at different batch sizes have one kind."""
    text = _PLACEHOLDER.sub("?", statement)
    text = _RUN_OF_SCALARS.sub("?*", _RUN_OF_TUPLES.sub("(?*)*", text))
    return _RUN_OF_WHENS.sub("WHEN* ", text)


@contextmanager
def texts_by_kind(store: Store) -> Iterator[dict[str, set[str]]]:
    """Every SQL text the store's engine sends meanwhile, by :func:`kind_of`."""
    seen: dict[str, set[str]] = defaultdict(set)

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen[kind_of(statement)].add(statement)

    sa.event.listen(store.db.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(store.db.engine, "before_cursor_execute", record)


def assert_bounded(store: Store, seen: dict[str, set[str]], label: str) -> None:
    one_text = store.db.backend.array_lists or store.db.backend.json_lists
    bound = 1 if one_text else PADDED_BOUND
    worst = max(seen.values(), key=len)
    assert len(worst) <= bound, (
        f"{label}: {len(worst)} texts of one statement (at most {bound} allowed), e.g. "
        f"{sorted(worst, key=len)[:2]}"
    )
    if store.db.backend.name == "postgresql":  # psycopg parses longer texts every time
        longest = max((t for texts in seen.values() for t in texts), key=len)
        assert len(longest.encode()) < 4096, longest


@contextmanager
def executed(store: Store) -> Iterator[list[Any]]:
    """Every statement object the store executes meanwhile (not its text: the object, so
    that a statement built once shows as the same object at each execution)."""
    sent: list[Any] = []

    def record(conn: Any, element: Any, *args: Any) -> None:
        if isinstance(element, sa.sql.ClauseElement):
            sent.append(element)

    sa.event.listen(store.db.engine, "before_execute", record)
    try:
        yield sent
    finally:
        sa.event.remove(store.db.engine, "before_execute", record)


def assert_built_once(store: Store, first: list[Any], second: list[Any]) -> None:
    """Two rounds of the same calls with other values executed the same statement objects."""
    assert len(first) == len(second)
    dialect = store.db.engine.dialect
    rebuilt = [
        str(a.compile(dialect=dialect)) for a, b in zip(first, second, strict=True) if a is not b
    ]
    assert not rebuilt, f"built again for a second call: {rebuilt}"


def _tasks(store: Store) -> list[int]:
    specs = [
        TaskSpec(name=f"job{i:03}", func="tests.jobs:noop", cron="* * * * * *")
        for i in range(TASKS)
    ]
    return [task.id for task in store.tasks.upsert(specs)]


def _advance_rounds(store: Store, task_ids: list[int], rounds: int) -> None:
    """Write *rounds* PENDING fires per task through advances of every size in SIZES, each
    task with its own next time (so a batch holds as many distinct values as rows)."""
    base = store.now().replace(microsecond=0) - timedelta(hours=1)
    versions = {task.id: task.version for task in store.tasks.due(base + timedelta(days=9), 999)}
    sizes = itertools.cycle(SIZES)
    stale: Advance | None = None
    for r in range(rounds):
        left = list(task_ids)
        while left:
            size = next(sizes)
            batch, left = left[:size], left[size:]
            fire = {i: base + timedelta(seconds=r, milliseconds=i) for i in batch}
            advances = [
                Advance(i, versions[i], fire[i] + timedelta(seconds=1), (PlannedFire(fire[i]),))
                for i in batch
            ]
            # a task of the batch before, at the version it had: fenced (else it would end)
            fenced = [stale] if stale and stale.task_id not in fire else []
            won = store.tasks.advance("shapes", advances + fenced)
            assert sorted(won) == sorted(batch)
            stale = Advance(batch[0], versions[batch[0]], None, ())
            for i in batch:
                versions[i] += 1
    for task in store.tasks.due(base + timedelta(days=9), 999):
        assert task.next_start_time == base + timedelta(seconds=rounds, milliseconds=task.id)
        assert task.fire_count == rounds


@pytest.fixture
def loaded(store: Store) -> Store:
    _advance_rounds(store, _tasks(store), 15)
    return store


def _pending(store: Store, limit: int) -> list[Candidate]:
    return store.runs.pending(store.now() + timedelta(days=1), limit)


def _claim_sizes(store: Store, node: str) -> Iterator[list[Run]]:
    """Claim a batch of each size in SIZES for *node*, each with a stale candidate (one
    claimed before: its version moved) that must not be won again."""
    stale: Candidate | None = None
    for size in SIZES:
        fresh = _pending(store, size)
        assert len(fresh) == size
        ids = {c.id for c in fresh}
        won = store.runs.claim(node, fresh + ([stale] if stale and stale.id not in ids else []))
        assert {r.id: (r.version, r.status) for r in won} == {
            c.id: (c.version + 1, RunStatus.CLAIMED) for c in fresh
        }
        stale = fresh[0]
        yield won


def _batches_of_one_transition(
    store: Store, node: str, act: Callable[[list[Run], Run | None], None]
) -> dict[str, set[str]]:
    """Claim batches of every size and hand each to *act* with a stale token of the batch
    before (None at first), recording only the statements *act* sends."""
    previous: Run | None = None
    merged: dict[str, set[str]] = defaultdict(set)
    for won in _claim_sizes(store, node):
        with texts_by_kind(store) as seen:
            # a token of a row this batch holds again (released, claimed anew) is left out:
            # a batch names each row once
            act(won, previous if previous and previous.id not in {r.id for r in won} else None)
        for kind, texts in seen.items():
            merged[kind] |= texts
        previous = won[0]
    return merged


def test_claim_has_few_texts_and_wins_exactly_the_fresh_rows(loaded: Store) -> None:
    with texts_by_kind(loaded) as seen:
        for _ in _claim_sizes(loaded, "a"):
            pass
    assert_bounded(loaded, seen, "claim")


def test_start_and_finish_have_few_texts_and_fence_stale_tokens(loaded: Store) -> None:
    started_runs: list[Run] = []

    running_tasks: set[int] = set()

    def start(batch: list[Run], stale: Run | None) -> None:
        # an odd batch has one exclusive run (of a task alone in the batch): BLOCKED when
        # its task already has a RUNNING run
        alone = Counter(r.task_id for r in batch)
        pick = next((r for r in reversed(batch) if alone[r.task_id] == 1), None)
        pick = pick if len(batch) % 2 else None
        started = loaded.runs.start_many(
            batch + ([stale] if stale else []), exclusive={pick.id} if pick else set()
        )
        blocked = pick is not None and pick.task_id in running_tasks
        expected: dict[int, Any] = {r.id: r.bumped(RunStatus.RUNNING) for r in batch}
        if blocked:
            assert pick is not None
            expected[pick.id] = BLOCKED
        assert started == {**expected, **({stale.id: None} if stale else {})}
        ran = [r.bumped(RunStatus.RUNNING) for r in batch if not (blocked and r is pick)]
        started_runs.extend(ran)
        running_tasks.update(r.task_id for r in ran)

    seen = _batches_of_one_transition(loaded, "a", start)
    assert_bounded(loaded, seen, "start_many")

    by_task: dict[int, int] = defaultdict(int)
    finishing = iter(started_runs)
    with texts_by_kind(loaded) as seen:
        stale: Run | None = None
        for size in SIZES:
            batch = list(itertools.islice(finishing, size))  # fewer: some were BLOCKED
            won = loaded.runs.finish_many(batch + ([stale] if stale else []))
            assert won == {r.id for r in batch}
            for r in batch:
                by_task[r.task_id] += 1
            stale = batch[0]
    assert_bounded(loaded, seen, "finish_many")
    counts = {t.id: t.success_count for t in loaded.tasks.all()}
    assert counts == {task: by_task.get(task, 0) for task in counts}


def test_close_has_few_texts_and_writes_each_runs_reason(loaded: Store) -> None:
    closed: dict[int, str] = {}

    def close(batch: list[Run], stale: Run | None) -> None:
        reasons = {r.id: f"missed: run {r.id} late" for r in [*batch, *([stale] if stale else [])]}
        done = loaded.runs.close_many(batch + ([stale] if stale else []), RunStatus.MISSED, reasons)
        assert done == {r.id for r in batch}
        closed.update({r.id: reasons[r.id] for r in batch})

    seen = _batches_of_one_transition(loaded, "a", close)
    assert_bounded(loaded, seen, "close_many")
    rows = loaded.history.runs(status=RunStatus.MISSED, limit=10_000)
    assert {r.id: r.error_msg for r in rows} == closed


def test_release_has_few_texts_and_hands_back_exactly_the_fresh_rows(loaded: Store) -> None:
    def release(batch: list[Run], stale: Run | None) -> None:
        assert loaded.runs.release_many(batch + ([stale] if stale else [])) == {r.id for r in batch}
        again = {c.id: c.version for c in _pending(loaded, 10_000)}
        assert all(again[r.id] == r.version + 1 for r in batch)

    seen = _batches_of_one_transition(loaded, "a", release)
    assert_bounded(loaded, seen, "release_many")


def test_due_and_pending_with_a_growing_exclude_list_have_few_texts(store: Store) -> None:
    task_ids = _tasks(store)
    _advance_rounds(store, task_ids, 1)
    horizon = store.now() + timedelta(days=9)
    with texts_by_kind(store) as seen:
        for size in SIZES:
            excluded = set(task_ids[:size])
            due = store.tasks.due(horizon, 999, exclude=excluded)
            assert {t.id for t in due} == set(task_ids) - excluded
            pending = store.runs.pending(horizon, 999, exclude=excluded)
            assert {c.task_id for c in pending} == set(task_ids) - excluded
    assert_bounded(store, seen, "due/pending")


def test_advance_has_few_texts(store: Store) -> None:
    task_ids = _tasks(store)
    with texts_by_kind(store) as seen:
        _advance_rounds(store, task_ids, 2)
    assert_bounded(store, seen, "advance")


def test_advance_writes_a_batchs_fires_in_one_statement_on_postgresql(store: Store) -> None:
    """On PostgreSQL an advance's fire rows go as one INSERT of arrays, never as an
    executemany: psycopg sends an executemany as one statement per row, each planned again
    with prepared statements off (issue 25). The rows are all written, each once."""
    if store.db.dialect != "postgresql":
        pytest.skip("PostgreSQL's batch INSERT")
    task_ids = _tasks(store)
    sent: list[tuple[str, bool]] = []

    def record(
        conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool
    ) -> None:
        if statement.startswith("INSERT INTO easy_job_task_detail"):
            sent.append((statement, many))

    sa.event.listen(store.db.engine, "before_cursor_execute", record)
    try:
        _advance_rounds(store, task_ids, 2)
    finally:
        sa.event.remove(store.db.engine, "before_cursor_execute", record)
    assert sent and not any(many for _, many in sent), sent[:1]
    assert len({statement for statement, _ in sent}) == 1
    count = sa.select(sa.func.count()).select_from(sa.table("easy_job_task_detail"))
    assert store.db.read("count", lambda conn: conn.scalar(count)) == 2 * TASKS


def test_the_batch_transitions_are_built_once(store: Store) -> None:
    """The planner's advance, the misses, the claim, start, release, close and finish
    UPDATEs, and the reads of the runs they touch, are built once and executed with each
    batch's parameters: SQLAlchemy keeps a statement's cache key on the statement object, and
    building a batch UPDATE and its key afresh for each call cost more than sending it
    (0.6-1.0 ms, issue 25)."""
    task_ids = _tasks(store)[:16]
    base = store.now() - timedelta(minutes=1)
    versions = {task.id: task.version for task in store.tasks.due(base + timedelta(days=9), 999)}

    def advance(tasks: list[int]) -> None:
        fire = (PlannedFire(base),)
        store.tasks.advance("shapes", [Advance(i, versions[i], base, fire) for i in tasks])
        for i in tasks:
            versions[i] += 1

    def transitions(tasks: list[int]) -> list[Any]:
        with executed(store) as sent:
            advance(tasks)
            batch = [c for c in store.runs.pending(store.now(), 100) if c.task_id in tasks]
            assert len(batch) == len(tasks)
            missed = store.runs.miss_pending({batch[-1].id: (batch[-1].version, "test")})
            assert missed == {batch[-1].id}
            started = store.runs.claim_started("shapes", batch[:2], exclusive={batch[0].id})
            assert store.runs.finish_many(started) == {r.id for r in started}
            claimed = store.runs.claim("shapes", batch[2:-1])
            runs = store.runs.start_many(claimed[:1], exclusive=())
            assert all(isinstance(run, Run) for run in runs.values())
            assert store.runs.release_many(claimed[1:2]) == {claimed[1].id}
            closed = store.runs.close_many(
                claimed[2:], RunStatus.SKIPPED, {r.id: "test" for r in claimed[2:]}
            )
            assert closed == {r.id for r in claimed[2:]}
        return sent

    first = transitions(task_ids[:6])
    second = transitions(task_ids[6:16])
    assert len(first) >= 10
    assert_built_once(store, first, second)


def test_the_reads_every_node_makes_every_poll_are_built_once(store: Store) -> None:
    """The planner's due read (in each of its shapes) and its read of the runs' fates, the
    heartbeat and its read of the node rows, recovery's reads of held runs and health's
    count of runs held past due are built once and executed with each call's values:
    every node, idle or not, makes them every second or few, and an idle SQLite node's
    planner spent two thirds of its CPU building its read (issue 25: 1.7 ms a poll, 0.6
    built once)."""
    all_ids = _tasks(store)
    task_ids = all_ids[:8]
    store.nodes.register("one", host="h", pid=1, weight=1, strategy="default", workers=4)
    store.nodes.register("two", host="h", pid=2, weight=1, strategy="default", workers=4)
    now = store.now()
    long_ago = now - timedelta(days=1)  # no task is overdue: the share alone decides

    def reads(node: str, excluded: list[int], rank: int, step: int) -> list[Any]:
        with executed(store) as sent:
            horizon = now + timedelta(days=step)
            assert len(store.tasks.due(horizon, 999)) == TASKS
            due = store.tasks.due(horizon, 999, excluded, behind_before=now)
            assert {t.id for t in due} == set(all_ids) - set(excluded)
            shared = store.tasks.due(
                horizon, 999, share=(rank, 2), overdue_before=long_ago, behind_before=now
            )
            step_ = store.db.id_step
            assert {t.id for t in shared} == {i for i in all_ids if i // step_ % 2 == rank}
            beat = store.nodes.heartbeat(node, clock_offset_ms=step, claimed=step, completed=0)
            assert beat.accepted
            assert [n.node_id for n in store.nodes.members(timedelta(seconds=30)).live] == [
                "one",
                "two",
            ]
            assert store.runs.held_by_dead(timedelta(seconds=step), 10, now=now) == []
            assert store.runs.held_by(node, 10) == []
            assert store.progress.held_due(node_id=node, now=now) == {}
            fates = store.runs.fates(long_ago, now, long_ago + timedelta(seconds=step))
            assert (fates.ran, fates.missed) == (0, 0)
        return sent

    first = reads("one", task_ids[:2], 0, 1)
    second = reads("two", task_ids[2:7], 1, 2)
    assert len(first) >= 8
    assert_built_once(store, first, second)
