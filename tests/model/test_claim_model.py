"""A model of the claim protocol, checked step by step against the real store.

Three nodes keep in memory the ``Run`` tokens they believe they hold, as real nodes do, and
the tokens they held once (superseded by their own next write, handed back, or fenced): a
stray thread of a node, or a node back from a pause, may still write with those. Every rule
is one or two real store calls:

- ``write_runs``: PENDING runs appear: a manual trigger, or a loader advancing the task's
  schedule past 1-3 fires (and a second loader that read the same task version, writing
  nothing); ``first_runs`` does the latter once at the start;
- ``loader_pass``: a node polls the PENDING runs, or reuses its last poll, which may be
  outdated by now, and claims a batch of them;
- ``start`` (one run, or a batch through ``start_many``; optionally exclusive: BLOCKED while
  another run of the task is RUNNING), ``finish`` (one run, or ``finish_many``), ``fail``
  (with or without a retry) and ``hand_back`` (release, or close unstarted as MISSED or
  SKIPPED), each with a token the node holds or held once;
- ``pause_or_resume``: a node that holds runs stops heartbeating (its heartbeat row is aged,
  past the dead threshold or not), keeping its tokens; or a paused node heartbeats again and
  carries on with the tokens it has;
- ``recovery_pass``: a node lists the runs held by dead nodes, or reuses its last listing,
  which may be outdated (the holder came back and moved on, or another recoverer was first),
  and takes back some of them.

Only nodes that are not paused act. The model predicts every row of ``easy_job_task_detail``
(status, version, holder) from the writes it expects to be accepted, and checks:

1. after every step, each row's status, version and node_id equal the model's, and there is
   no row the model did not expect;
2. a write is accepted iff its token is current (version, status and holder match the row);
   a stale holder's write is rejected and changes nothing (no row, no child, no retry);
3. at most one attempt of a fire is ever SUCCESS, and a fire never has two live
   (PENDING/CLAIMED/RUNNING) attempts at once;
4. versions only grow;
5. recovered runs become ABANDONED, each with exactly one new PENDING attempt (attempt + 1,
   same task, parent and fire time, triggered by recovery); outdated entries are left alone;

and also: ``pending()`` returns exactly the PENDING rows and ``held_by_dead()`` exactly the
runs of dead nodes (not those of a node that is only late), a claim wins exactly the
candidates whose version is still current, every CLAIMED/RUNNING row is known
to its holder with its current token (no orphaned claims), and an accepted write creates
exactly the rows the contract names (a retry; a PENDING child per success; a SKIPPED child
per final failure).

``test_model_catches_unfenced_writes`` runs the same machine against stores whose fenced
transitions lose their version and holder conditions, and requires Hypothesis to find a
counterexample. The ``test_mariadb_*`` tests pin the fix of a fencing hole the model
found in the MariaDB path of ``Database.winners`` (see the comment above them).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy.sql import operators, visitors

from easyjob.core.records import Advance, Candidate, HeldRun, PlannedFire, Run, TaskSpec
from easyjob.core.states import HELD, RUN_TRANSITIONS, NodeStatus, RunStatus, Trigger
from easyjob.store import RetryPolicy, Store
from easyjob.store.engine import db_now
from easyjob.store.runs import BLOCKED
from easyjob.store.schema import node_table, task_detail_table

d = task_detail_table
n = node_table

PENDING, CLAIMED, RUNNING = RunStatus.PENDING, RunStatus.CLAIMED, RunStatus.RUNNING
SUCCESS, FAILED, ABANDONED = RunStatus.SUCCESS, RunStatus.FAILED, RunStatus.ABANDONED
SKIPPED = RunStatus.SKIPPED
LIVE = (PENDING, CLAIMED, RUNNING)

NODES = ("n0", "n1", "n2")
DEAD_AFTER = timedelta(minutes=10)
LONG_PAUSE = timedelta(days=1)  # a paused node's heartbeat is aged by this: it is dead
SHORT_PAUSE = DEAD_AFTER / 2  # or by this: it is late, but alive
HORIZON = datetime(2999, 1, 1, tzinfo=UTC)  # every PENDING run is due before it
RETRY_IN = timedelta(seconds=5)
JOB = TaskSpec(name="job", func="tests.jobs:noop", cron="* * * * * *")
CHILD = TaskSpec(name="child", func="tests.jobs:noop", parent="job")
RETRY = RetryPolicy(deadline_s=10.0, initial_s=0.02, max_wait_s=0.5)

OUTCOME = {
    "start": RUNNING,
    "start_exclusive": RUNNING,
    "release": PENDING,
    "miss": RunStatus.MISSED,
    "skip": SKIPPED,
    "finish": SUCCESS,
    "fail": FAILED,
    "fail_retry": FAILED,
}

#: On MariaDB (no UPDATE ... RETURNING), ``Database.winners`` once fell back, when a batch
#: UPDATE changed some but not all rows, to ``SELECT id WHERE version = <read> + 1 AND <mine>``:
#: a row the same node had moved from that version in an EARLIER call matched too and was
#: reported as won again (``claim`` returned a run it did not win, ``start_many`` started a run
#: twice, ``finish_many`` wrote children twice). It now locks the batch's rows first. The
#: ``test_mariadb_*`` tests below pin the fix on every backend.

#: Rule arguments: ``node=1`` is n1 (a step whose node may not do this now does nothing);
#: ``run=0`` / ``picks=[0]`` pick the node's first candidates or tokens (by index modulo their
#: number; see :meth:`Node.pool`), so a shrunk counterexample reads as small numbers.
NODE = st.integers(0, len(NODES) - 1)
PICK = st.integers(0, 3)
PICKS = st.lists(PICK, min_size=1, max_size=3)


def _nth(items: Sequence[Any], which: int) -> Any:
    return items[which % len(items)]


@dataclass
class Row:
    """The model's expectation of one run row."""

    status: RunStatus
    version: int
    node_id: str | None
    task_id: int
    fire: int  # the model's id of the fire this row is an attempt of


@dataclass
class Node:
    name: str
    paused: bool = False  # it does nothing until it resumes
    dead: bool = False  # paused, and its heartbeat is older than DEAD_AFTER
    tokens: dict[int, Run] = field(default_factory=dict)  # runs it believes it holds
    stale: dict[int, Run] = field(default_factory=dict)  # per run, the last token it held once
    polled: list[Candidate] = field(default_factory=list)  # its last poll, maybe outdated
    scanned: list[HeldRun] = field(default_factory=list)  # its last listing of dead nodes' runs

    def pool(self, status: RunStatus, old: bool = False) -> list[Run]:
        """Its tokens of *status*, one per run: the ones it holds, then the ones it held once
        of runs it does not hold in that status now; or, when *old*, all the ones it held
        once (also of runs it holds again in that status, under a newer version)."""
        once = [t for _, t in sorted(self.stale.items()) if t.status == status]
        if old:
            return once
        current = [self.tokens[i] for i in sorted(self.tokens) if self.tokens[i].status == status]
        held = {t.id for t in current}
        return current + [t for t in once if t.id not in held]


@dataclass
class Expect:
    """What the model expects of one write with one token."""

    current: bool
    blocked: bool

    @property
    def accepted(self) -> bool:
        return self.current and not self.blocked


class ClaimProtocol(RuleBasedStateMachine):
    """The model; :func:`_machine_for` makes a subclass that knows where to find a store with
    the two tasks, the three nodes (fresh heartbeats) and no runs."""

    open_store: Callable[[], Store]
    close_store: Callable[[Store], None]

    def __init__(self) -> None:
        super().__init__()
        self.store = type(self).open_store()
        tasks = {t.name: t for t in self.store.tasks.all()}
        job = tasks[JOB.name]
        self.job_id, self.child_id = job.id, tasks[CHILD.name].id
        self.task_version = job.version
        assert job.next_start_time is not None
        self.next_fire_time = job.next_start_time
        self.nodes = {name: Node(name) for name in NODES}
        self.rows: dict[int, Row] = {}
        self.fires = itertools.count(1)
        self.seen_versions: dict[int, int] = {}
        self.succeeded: dict[int, int] = {}  # fire -> the one run of it ever seen SUCCESS

    def teardown(self) -> None:
        type(self).close_store(self.store)

    # -- reading the database -----------------------------------------------------------------

    def _db_rows(self) -> dict[int, Any]:
        def read(conn: sa.Connection) -> dict[int, Any]:
            query = sa.select(
                d.c.id,
                d.c.task_id,
                d.c.pid,
                d.c.fire_time,
                d.c.status,
                d.c.triggered_by,
                d.c.attempt,
                d.c.node_id,
                d.c.version,
            )
            return {row.id: row for row in conn.execute(query)}

        return self.store.db.read("model_rows", read)

    def _new_rows(self) -> list[Any]:
        """Rows in the database the model does not know yet, by id."""
        rows = self._db_rows()
        return [rows[i] for i in sorted(set(rows) - set(self.rows))]

    def _add(self, row: Any, fire: int, status: RunStatus) -> None:
        assert (row.status, row.version, row.node_id) == (status, 0, None), row
        self.rows[row.id] = Row(status, 0, None, row.task_id, fire)

    # -- choosing -----------------------------------------------------------------------------

    def _awake(self) -> list[str]:
        return [name for name, node in self.nodes.items() if not node.paused]

    def _node(self, names: list[str], which: int) -> Node | None:
        """Node *which* if it may act now (else the step does nothing)."""
        return self.nodes[NODES[which]] if NODES[which] in names else None

    def _pool(self, node: Node, status: RunStatus, old: bool = False) -> list[Run]:
        """The node's tokens to write with (see :meth:`Node.pool`; the other kind if none)."""
        return node.pool(status, old) or node.pool(status, not old)

    def _workers(self, status: RunStatus) -> list[str]:
        return [name for name in self._awake() if self._pool(self.nodes[name], status)]

    # -- writing PENDING runs -----------------------------------------------------------------

    def _advance(self, count: int) -> None:
        """A loader moves the task's schedule past *count* fires and writes them as runs; a
        second loader that read the same task version then writes nothing."""
        times = [self.next_fire_time + timedelta(seconds=i) for i in range(count)]
        fires = tuple(map(PlannedFire, times))
        step = Advance(self.job_id, self.task_version, times[-1] + timedelta(seconds=1), fires)
        assert self.store.tasks.advance(NODES[0], [step]) == [self.job_id]
        new = self._new_rows()
        assert [(r.fire_time, r.triggered_by, r.attempt) for r in new] == [
            (t, Trigger.CRON, 1) for t in times
        ]
        for row in new:
            self._add(row, next(self.fires), PENDING)
        self.task_version += 1
        self.next_fire_time = times[-1] + timedelta(seconds=1)
        assert self.store.tasks.advance(NODES[1], [step]) == [], "a stale advance was accepted"
        assert self._new_rows() == [], "a stale advance wrote runs"

    @initialize(count=st.integers(1, 3))
    def first_runs(self, count: int) -> None:
        self._advance(count)

    @rule(count=st.integers(0, 3))
    def write_runs(self, count: int) -> None:
        """A loader advancing the schedule past *count* fires, or (0) a manual trigger."""
        if count:
            self._advance(count)
            return
        run_id = self.store.tasks.trigger("job")
        (row,) = self._new_rows()
        assert (row.id, row.triggered_by, row.attempt) == (run_id, Trigger.MANUAL, 1)
        self._add(row, next(self.fires), PENDING)

    # -- polling and claiming -----------------------------------------------------------------

    def _claim(self, node: Node, picks: list[int], started: bool = False) -> None:
        offer = [c.id for c in node.polled]
        if not offer:
            return
        picked = {_nth(offer, i) for i in picks}
        batch = [c for c in node.polled if c.id in picked]
        expected = {
            c.id
            for c in batch
            if (self.rows[c.id].status, self.rows[c.id].version) == (PENDING, c.version)
        }
        if started:  # claimed and started in one write (a run due when claimed)
            won = self.store.runs.claim_started(node.name, batch)
        else:
            won = self.store.runs.claim(node.name, batch)
        status = RUNNING if started else CLAIMED
        assert len(won) == len({r.id for r in won}), f"a run was reported won twice: {won}"
        assert {r.id for r in won} == expected, (
            f"fencing: claim of {[(c.id, c.version) for c in batch]} by {node.name} won "
            f"{sorted(r.id for r in won)}; the current candidates were {sorted(expected)}"
        )
        for run in won:
            row = self.rows[run.id]
            row.status, row.version, row.node_id = status, row.version + 1, node.name
            assert (run.status, run.version, run.node_id) == (status, row.version, node.name)
            node.tokens[run.id] = run

    def _pending(self) -> bool:
        return any(r.status == PENDING for r in self.rows.values())

    @precondition(lambda self: self._pending() or any(self.nodes[x].polled for x in self._awake()))
    @rule(node=NODE, picks=PICKS, poll=st.booleans(), started=st.booleans())
    def loader_pass(self, node: int, picks: list[int], poll: bool, started: bool) -> None:
        """The node polls the PENDING runs (or, unless *poll*, reuses its last poll, which may
        be outdated: others, or itself, may have claimed some of it since) and claims a batch
        of what it found (with *started*, claimed and started in one write)."""
        loader = self._node(self._awake(), node)
        if loader is None:
            return
        if poll or not loader.polled:
            found = self.store.runs.pending(HORIZON, 1000)
            expected = {i: r.version for i, r in self.rows.items() if r.status == PENDING}
            assert {c.id: c.version for c in found} == expected, "pending() is not PENDING rows"
            loader.polled = sorted(found, key=lambda c: c.id)  # by id: due order is time-bound
        self._claim(loader, picks, started)

    # -- writes with a token ------------------------------------------------------------------

    def _expect(self, token: Run, action: str) -> Expect:
        row = self.rows[token.id]
        current = (row.status, row.version, row.node_id) == (
            token.status,
            token.version,
            token.node_id,
        )
        assert OUTCOME[action] in RUN_TRANSITIONS[token.status]
        blocked = (
            action == "start_exclusive"
            and current
            and any(
                r.status == RUNNING and r.task_id == token.task_id
                for i, r in self.rows.items()
                if i != token.id
            )
        )
        return Expect(current, blocked)

    def _check(self, node: Node, token: Run, action: str, want: Expect, accepted: bool) -> None:
        row = self.rows[token.id]
        assert accepted == want.accepted, (
            f"fencing: {action} by {node.name} with token (version {token.version}, "
            f"{token.status}, {token.node_id}) of run {token.id} (row: version {row.version}, "
            f"{row.status}, {row.node_id}) was {'accepted' if accepted else 'rejected'}"
        )

    def _apply(self, node: Node, token: Run, action: str, want: Expect) -> None:
        """The node's and the model's view after the write (checked as expected)."""
        if want.blocked:
            return  # nothing changed: the node keeps its token and tries again later
        if node.tokens.get(token.id) == token:
            del node.tokens[token.id]  # superseded, handed back, finished, or fenced
        node.stale[token.id] = token
        if not want.accepted:
            return
        row = self.rows[token.id]
        row.status, row.version = OUTCOME[action], row.version + 1
        if action == "release":
            row.node_id = None
        if row.status in HELD:
            node.tokens[token.id] = token.bumped(row.status)

    def _check_created(self, written: Sequence[tuple[Run, str]]) -> None:
        """The rows accepted writes make: a retry, or one row per child task of a job run."""
        expected: list[tuple[Any, ...]] = []
        fires: dict[tuple[Any, ...], int] = {}
        for token, action in written:
            if action == "fail_retry":
                made = (token.task_id, token.pid, token.fire_time, Trigger.RETRY, token.attempt + 1)
                expected.append((*made, PENDING))
                fires[expected[-1]] = self.rows[token.id].fire
            elif action in ("finish", "fail") and token.task_id == self.job_id:
                status = PENDING if action == "finish" else SKIPPED
                made = (self.child_id, token.id, token.fire_time, Trigger.PARENT, 1)
                expected.append((*made, status))
        new = self._new_rows()
        got = [(r.task_id, r.pid, r.fire_time, r.triggered_by, r.attempt, r.status) for r in new]
        assert sorted(got, key=repr) == sorted(expected, key=repr), (
            f"writes {[(t.id, a) for t, a in written]} made rows {got}, expected {expected}"
        )
        for row, made in zip(new, got, strict=True):
            self._add(row, fires.get(made) or next(self.fires), made[-1])

    def _write_one(self, node: Node, token: Run, action: str) -> None:
        want = self._expect(token, action)
        if action == "release":
            accepted = self.store.runs.release(token)
        elif action in ("miss", "skip"):
            accepted = self.store.runs.close_unstarted(token, OUTCOME[action], "model")
        else:
            retry = RETRY_IN if action == "fail_retry" else None
            accepted = self.store.runs.fail(token, "model", retry_in=retry)
        self._check(node, token, action, want, accepted)
        self._apply(node, token, action, want)
        self._check_created([(token, action)] if accepted else [])

    @precondition(lambda self: bool(self._workers(CLAIMED)))
    @rule(node=NODE, picks=PICKS, old=st.booleans(), exclusive=st.booleans())
    def start(self, node: int, picks: list[int], old: bool, exclusive: bool) -> None:
        """Start one run, or a batch (``start_many``); exclusive (overlap serial/skip) means
        at most one run per task, each starting only if no other run of its task is
        RUNNING."""
        worker = self._node(self._workers(CLAIMED), node)
        if worker is None:
            return
        pool = self._pool(worker, CLAIMED, old)
        batch = [pool[i] for i in sorted({i % len(pool) for i in picks})]
        if exclusive:  # the first run of each task
            firsts: dict[int, Run] = {}
            for token in batch:
                firsts.setdefault(token.task_id, token)
            batch = list(firsts.values())
        action = "start_exclusive" if exclusive else "start"
        wants = [self._expect(t, action) for t in batch]
        if len(batch) == 1:
            started = {batch[0].id: self.store.runs.start(batch[0], exclusive=exclusive)}
        else:
            only_if_free = {t.id for t in batch} if exclusive else set()
            started = self.store.runs.start_many(batch, exclusive=only_if_free)
        assert set(started) == {t.id for t in batch}, started
        for token, want in zip(batch, wants, strict=True):
            result = started[token.id]
            assert (result is BLOCKED) == want.blocked, f"start of {token.id}: {result}"
            accepted = result is not None and result is not BLOCKED
            assert not accepted or result == token.bumped(RUNNING), result
            self._check(worker, token, action, want, accepted)
        for token, want in zip(batch, wants, strict=True):
            self._apply(worker, token, action, want)
        self._check_created([])

    @precondition(lambda self: bool(self._workers(RUNNING)))
    @rule(node=NODE, picks=PICKS, old=st.booleans())
    def finish(self, node: int, picks: list[int], old: bool) -> None:
        """Record the success of one run, or of a batch (``finish_many``)."""
        worker = self._node(self._workers(RUNNING), node)
        if worker is None:
            return
        pool = self._pool(worker, RUNNING, old)
        batch = [pool[i] for i in sorted({i % len(pool) for i in picks})]
        wants = [self._expect(t, "finish") for t in batch]
        if len(batch) == 1:
            done = {batch[0].id} if self.store.runs.finish(batch[0]) else set()
        else:
            done = self.store.runs.finish_many(batch)
        assert done <= {t.id for t in batch}, done
        for token, want in zip(batch, wants, strict=True):
            self._check(worker, token, "finish", want, token.id in done)
        for token, want in zip(batch, wants, strict=True):
            self._apply(worker, token, "finish", want)
        self._check_created([(t, "finish") for t in batch if t.id in done])

    @precondition(lambda self: bool(self._workers(RUNNING)))
    @rule(node=NODE, run=PICK, old=st.booleans(), retry=st.booleans())
    def fail(self, node: int, run: int, old: bool, retry: bool) -> None:
        worker = self._node(self._workers(RUNNING), node)
        if worker is None:
            return
        token = _nth(self._pool(worker, RUNNING, old), run)
        self._write_one(worker, token, "fail_retry" if retry else "fail")

    @precondition(lambda self: bool(self._workers(CLAIMED)))
    @rule(node=NODE, run=PICK, old=st.booleans(), how=st.sampled_from(["release", "miss", "skip"]))
    def hand_back(self, node: int, run: int, old: bool, how: str) -> None:
        """Release a claimed run, or close it unstarted (misfire or overlap policy)."""
        worker = self._node(self._workers(CLAIMED), node)
        if worker is None:
            return
        self._write_one(worker, _nth(self._pool(worker, CLAIMED, old), run), how)

    # -- pausing, recovery, coming back -------------------------------------------------------

    def _holding(self) -> list[str]:
        """Nodes that hold runs (whether they know it or not)."""
        return sorted({r.node_id for r in self.rows.values() if r.status in HELD and r.node_id})

    @precondition(
        lambda self: (
            len(self._awake()) < len(NODES) or (len(self._awake()) > 1 and bool(self._holding()))
        )
    )
    @rule(node=NODE, long=st.booleans())
    def pause_or_resume(self, node: int, long: bool) -> None:
        """A node that holds runs stops (GC pause, cut off; not the last awake node): it
        keeps its tokens but does not heartbeat, for longer than the dead threshold when
        *long* (it is dead), else shorter (it is late, and nobody may take its runs). Or, if
        paused, it comes back: it heartbeats and carries on with the tokens it has."""
        stopped = self.nodes[NODES[node]]
        if stopped.paused:
            beat = self.store.nodes.heartbeat(
                stopped.name, clock_offset_ms=0, claimed=0, completed=0
            )
            assert beat.accepted
            stopped.paused = stopped.dead = False
            return
        if len(self._awake()) == 1 or stopped.name not in self._holding():
            return
        name, by = stopped.name, LONG_PAUSE if long else SHORT_PAUSE

        def age(conn: sa.Connection) -> None:
            at = conn.scalar(sa.select(n.c.heartbeat_at).where(n.c.node_id == name))
            conn.execute(n.update().where(n.c.node_id == name).values(heartbeat_at=at - by))

        self.store.db.write("model_age", age)
        stopped.paused, stopped.dead = True, long

    def _recover(self, node: Node, held: list[HeldRun]) -> None:
        taken = [
            h
            for h in held
            if (self.rows[h.id].status, self.rows[h.id].version) == (h.status, h.version)
        ]
        created = self.store.runs.recover(held, node.name)
        assert len(created) == len(taken), (
            f"fencing: recover of {[(h.id, h.version, h.status) for h in held]} made attempts "
            f"{created}; the current ones were {[h.id for h in taken]}"
        )
        new = self._new_rows()
        assert [r.id for r in new] == sorted(created)
        by_id = {r.id: r for r in new}
        for h, new_id in zip(taken, created, strict=True):
            row = self.rows[h.id]
            row.status, row.version = ABANDONED, row.version + 1
            made = by_id[new_id]
            assert (made.task_id, made.pid, made.fire_time, made.triggered_by, made.attempt) == (
                h.task_id,
                h.pid,
                h.fire_time,
                Trigger.RECOVERY,
                h.attempt + 1,
            )
            self._add(made, row.fire, PENDING)

    @precondition(
        lambda self: (
            any(self.nodes[x].paused for x in self._holding())
            or any(self.nodes[x].scanned for x in self._awake())
        )
    )
    @rule(node=NODE, picks=PICKS, scan=st.booleans())
    def recovery_pass(self, node: int, picks: list[int], scan: bool) -> None:
        """The node lists the runs held by dead nodes (or, unless *scan*, reuses its last
        listing, which may be outdated: their holder came back and moved on, or they were
        recovered since) and takes back some of them."""
        recoverer = self._node(self._awake(), node)
        if recoverer is None:
            return
        if scan or not recoverer.scanned:
            held = self.store.runs.held_by_dead(DEAD_AFTER, 1000)
            expected = {
                i: (r.status, r.version, r.node_id)
                for i, r in self.rows.items()
                if r.status in HELD and self.nodes[r.node_id or ""].dead
            }
            assert {h.id: (h.status, h.version, h.node_id) for h in held} == expected
            recoverer.scanned = held
        held = recoverer.scanned
        if held:
            self._recover(recoverer, [held[i] for i in sorted({i % len(held) for i in picks})])

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def database_matches_the_model(self) -> None:
        db = self._db_rows()
        assert set(db) == set(self.rows), f"rows {set(db) ^ set(self.rows)} unexpected/missing"
        live: dict[int, list[int]] = {}
        for run_id, got in db.items():
            want = self.rows[run_id]
            assert (got.status, got.version, got.node_id) == (
                want.status,
                want.version,
                want.node_id,
            ), f"run {run_id}: database has {(got.status, got.version, got.node_id)}, model {want}"
            assert got.version >= self.seen_versions.get(run_id, 0), f"run {run_id} went back"
            self.seen_versions[run_id] = got.version
            if got.status == SUCCESS:
                first = self.succeeded.setdefault(want.fire, run_id)
                assert first == run_id, f"fire {want.fire} succeeded twice: runs {first}, {run_id}"
            if got.status in LIVE:
                live.setdefault(want.fire, []).append(run_id)
        doubled = {fire: ids for fire, ids in live.items() if len(ids) > 1}
        assert not doubled, f"fires with two live attempts: {doubled}"

    @invariant()
    def holders_know_their_runs(self) -> None:
        for run_id, row in self.rows.items():
            if row.status in HELD:
                token = self.nodes[row.node_id or ""].tokens.get(run_id)
                assert token is not None, f"run {run_id} is held by {row.node_id} unknowingly"
                assert (token.status, token.version) == (row.status, row.version)


# -- running it on each backend -----------------------------------------------------------------


def _set_up(store: Store) -> Store:
    """The two tasks and the three nodes."""
    store.tasks.upsert([JOB, CHILD])
    for name in NODES:
        store.nodes.register(name, host="model", pid=1, weight=1, strategy="default", workers=4)
    return store


def _emptied(store: Store) -> Store:
    """No runs, every node RUNNING with a fresh heartbeat (one short transaction)."""

    def reset(conn: sa.Connection) -> None:
        conn.execute(d.delete())
        conn.execute(n.update().values(heartbeat_at=db_now(), status=str(NodeStatus.RUNNING)))

    store.db.write("model_reset", reset)
    return store


@contextmanager
def _machine_for(
    url: str, fresh_in: Path | None = None, prepare: Callable[[Store], None] = lambda s: None
) -> Iterator[type[ClaimProtocol]]:
    """The machine class: on a fresh SQLite file per example in *fresh_in* when given, else on
    one store at *url* emptied of runs before each example. *prepare* sees each new store."""
    counter = itertools.count()

    def fresh() -> Store:
        url = f"sqlite:///{fresh_in}/example-{next(counter)}.db"
        store = Store.open(url, create=True, retry=RETRY)
        prepare(store)
        return _set_up(store)

    if fresh_in is not None:
        yield _machine(fresh, Store.close)
        return
    store = Store.open(url, create=True, retry=RETRY)
    try:
        prepare(store)
        _set_up(store)
        yield _machine(lambda: _emptied(store), lambda _store: None)
    finally:
        store.close()


def _machine(
    open_store: Callable[[], Store], close_store: Callable[[Store], None]
) -> type[ClaimProtocol]:
    return type(
        "ClaimProtocol",
        (ClaimProtocol,),
        {"open_store": staticmethod(open_store), "close_store": staticmethod(close_store)},
    )


def _settings(examples: int, steps: int, **options: Any) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=True,  # the same examples on every run: never flaky
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        **options,
    )


SETTINGS = {
    "sqlite": _settings(100, 40),
    "postgresql": _settings(40, 40),
    "mariadb": _settings(40, 40),
}


def test_claim_protocol_matches_the_model(db_backend: str, db_url: str, tmp_path: Path) -> None:
    fresh_in = tmp_path if db_backend == "sqlite" else None
    with _machine_for(db_url, fresh_in) as machine:
        run_state_machine_as_test(machine, settings=SETTINGS[db_backend])


# -- the model catches an unfenced store --------------------------------------------------------


def _without_fencing(store: Store, columns: Sequence[sa.Column[Any]]) -> None:
    """Break *store*: every fenced transition of a run (the UPDATEs of start, finish, fail,
    release and close, recognised by their holder condition) loses its conditions on
    *columns*, as in the original easy-job whose status writes were not versioned. Claims and
    recoveries are left as they are."""

    def checks(element: Any, column: sa.Column[Any]) -> bool:
        """A condition on *column*: ``column = x``, ``coalesce(column, '') = x`` (a batch's
        status check) or ``(id, column) IN (...)`` (a batch's versions)."""
        if not isinstance(element, sa.BinaryExpression):
            return False
        left = element.left
        if element.operator is operators.eq:
            if isinstance(left, sa.FunctionElement):
                return any(c is column for c in left.clauses)
            return left is column
        if element.operator is operators.in_op and isinstance(left, sa.Tuple):
            return any(c is column for c in left.clauses)
        return False

    def unfence(
        conn: sa.Connection, stmt: Any, multiparams: Any, params: Any, options: Any
    ) -> tuple[Any, Any, Any]:
        fenced = isinstance(stmt, sa.Update) and stmt.table is d
        if fenced and any(checks(e, d.c.node_id) for e in visitors.iterate(stmt.whereclause)):
            stmt = visitors.replacement_traverse(
                stmt, {}, lambda e: sa.true() if any(checks(e, c) for c in columns) else None
            )
        return stmt, multiparams, params

    sa.event.listen(store.db.engine, "before_execute", unfence, retval=True)


BROKEN = {
    # The original easy-job's trap: the status is checked, the version and holder are not.
    "status_only": (d.c.version, d.c.node_id),
    # No fencing at all: the row is written by id.
    "by_id_only": (d.c.version, d.c.node_id, d.c.status),
}

#: Deterministic (derandomized) and quick: one store emptied between examples, stop at the
#: first failure, no shrinking. (With ``Phase.shrink`` added, shrinking takes 15-35 s more; it
#: ends at 4 steps for ``by_id_only``: first runs, claim, release, release again with the same
#: token; and at 5 for ``status_only``: first runs, claim, release, claim again (same node),
#: release with the first CLAIMED token, which only its version tells from the current one.)
FIND_BROKEN = _settings(300, 25, phases=[Phase.generate])


def _steps(err: BaseException) -> list[str]:
    """The rule calls of the counterexample Hypothesis reports (its notes on the error)."""
    lines = [line.strip() for note in getattr(err, "__notes__", []) for line in note.splitlines()]
    checks = ("state.teardown(", "state.database_matches_the_model(", "state.holders_know_their")
    return [x for x in lines if x.startswith("state.") and not x.startswith(checks)]


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_model_catches_unfenced_writes(broken: str, tmp_path: Path) -> None:
    def prepare(store: Store) -> None:
        _without_fencing(store, BROKEN[broken])

    with (
        _machine_for(f"sqlite:///{tmp_path}/broken.db", prepare=prepare) as machine,
        pytest.raises(AssertionError) as caught,
    ):
        run_state_machine_as_test(machine, settings=FIND_BROKEN)
    steps = _steps(caught.value)
    print(f"{broken}: caught after {len(steps)} steps:", *steps, sep="\n  ")
    assert "fencing" in str(caught.value), caught.value
    assert steps


# -- the MariaDB fallback of Database.winners ---------------------------------------------------


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    store = Store.open(db_url, create=True, retry=RETRY)
    try:
        store.tasks.upsert([JOB, CHILD])
        for _ in range(2):
            store.tasks.trigger("job")
        yield store
    finally:
        store.close()


def _claimed(store: Store, node: str) -> list[Run]:
    return sorted(store.runs.claim(node, store.runs.pending(HORIZON, 10)), key=lambda r: r.id)


def test_mariadb_claim_reports_only_the_runs_this_call_won(store: Store) -> None:
    first, second = sorted(store.runs.pending(HORIZON, 10), key=lambda c: c.id)
    assert [r.id for r in store.runs.claim("a", [first])] == [first.id]
    # The same (now outdated) candidate again, in a batch that wins another run.
    assert [r.id for r in store.runs.claim("a", [first, second])] == [second.id]


def test_mariadb_start_many_reports_a_run_started_once(store: Store) -> None:
    one, two = _claimed(store, "a")
    assert isinstance(store.runs.start(one), Run)
    # A stray copy of one's CLAIMED token, batched with two: one must not start again.
    started = store.runs.start_many([one, two], exclusive=())
    assert (started[one.id], started[two.id]) == (None, two.bumped(RUNNING))


def test_mariadb_finish_many_makes_children_once(store: Store) -> None:
    one, two = (store.runs.start(r) for r in _claimed(store, "a"))
    assert isinstance(one, Run) and isinstance(two, Run)
    assert store.runs.finish(one)
    # A stray copy of one's RUNNING token, batched with two: one's outcome was written.
    assert store.runs.finish_many([one, two]) == {two.id}
    children = sorted(r.pid for r in store.history.runs(task="child"))
    assert children == [one.id, two.id]
    assert store.tasks.get("job").success_count == 2
