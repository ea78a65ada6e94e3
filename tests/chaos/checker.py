"""From what happened (ledger, run rows, fault log, samples) to a :class:`Report`, and from
a report to the list of contract invariants it breaks (:func:`check`).

Invariants (DESIGN.md, "The contract"):

1. no lost fire: every expected fire ran;
2. no duplicate without a crash, or a pause longer than the dead threshold, of the node that
   held the earlier attempt (see :mod:`tests.chaos.faults`);
3. no write accepted from a fenced holder;
4. failover within the documented bound (plus :data:`FAILOVER_SLACK_S`);
5. no takeover (recovery attempt) without a crash or long pause behind it: after a
   database-wide stall nobody recovers a live peer's work;
6. no node process dies unless the scenario killed or stopped it;
7. no row left stuck after the faults stopped;
8. next fire times never go backwards;
9. chains: each child runs once per successful parent run, and only after one;
10. nothing runs that the contract says must not (e.g. late fires under ``skip``);
11. a fire that did not run still has a row (MISSED, or within a MISSED summary row's
    ``fire_time`` .. ``last_fire_time``): none is dropped silently.

An expected fire that was *superseded* (MISSED because a later fire of its ``fire_once`` or
``skip`` task was due before it could start, see docs/policies.md) is not lost when a later
fire of its task ran: it is counted apart (``superseded``).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime

from easyjob.core.records import HistoryRow
from easyjob.core.states import RunStatus, Trigger
from tests.chaos.expected import Window
from tests.chaos.faults import Fault
from tests.chaos.ledger import Execution

__all__ = ["FAILOVER_SLACK_S", "Expectations", "Observation", "Report", "build", "check"]

Key = tuple[str, datetime]
_Note = Callable[[str, str], None]
#: What the error of a superseded fire's MISSED row says.
SUPERSEDED = "not started before a later fire of the task was due"

#: Scheduling noise allowed on top of the documented failover bound: on this 2-core machine
#: the node processes, the database server and the test compete for the CPU.
FAILOVER_SLACK_S = 1.0
_EXAMPLES = 5


@dataclass(frozen=True)
class Expectations:
    """Which fires (task, fire time) the contract owes in this scenario.

    *must* run exactly once (a second run only after a takeover fault); *may* run at most
    once (e.g. a fire at the misfire grace boundary); *never* must not run. *chains* maps a
    child task to its parent: a child fire is owed for each successful parent run whose fire
    is in the window, and a child must never run without one.
    """

    must: frozenset[Key]
    may: frozenset[Key] = frozenset()
    never: frozenset[Key] = frozenset()
    chains: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Observation:
    """Everything a scenario saw, gathered by the runner (or built by hand in a test)."""

    scenario: str
    db: str
    window: Window
    expectations: Expectations
    executions: list[Execution]
    runs: list[HistoryRow]
    faults: list[Fault]
    dead_threshold_s: float
    failover_bound_s: float | None  # None: no bound applies (e.g. nobody was left to recover)
    next_fire_samples: Mapping[str, list[tuple[float, datetime | None]]] = field(
        default_factory=dict
    )
    stuck: list[str] = field(default_factory=list)
    died: list[str] = field(default_factory=list)
    clock_offsets_s: Mapping[str, float] = field(default_factory=dict)  # node clock - host


@dataclass(frozen=True)
class Report:
    """One scenario on one database, in figures; one JSON line in the results file."""

    scenario: str
    db: str
    window_s: float
    expected: int
    run: int
    missing: int
    duplicated: int
    duplicated_allowed: int
    stale_accepted: int
    unexplained_takeovers: int
    forbidden_runs: int
    silently_dropped: int
    chain_violations: int
    next_fire_backwards: int
    max_failover_s: float | None
    failover_bound_s: float | None
    lateness_p99_ms: float | None
    died: list[str]
    stuck: list[str]
    faults: list[str]
    examples: dict[str, list[str]]
    superseded: int = 0

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def build(obs: Observation) -> Report:
    """Judge *obs*: count and give examples of everything the invariants look at."""
    examples: dict[str, list[str]] = defaultdict(list)

    def note(what: str, text: str) -> None:
        if len(examples[what]) < _EXAMPLES:
            examples[what].append(text)

    runs_by_id = {r.id: r for r in obs.runs}
    must = set(obs.expectations.must)
    chain_bad = _chains(obs, must, note)
    owed = must | obs.expectations.may
    by_key: dict[Key, list[Execution]] = defaultdict(list)
    for ex in obs.executions:
        by_key[ex.key].append(ex)

    superseded = {k for k in must if not by_key.get(k) and _superseded(k, obs, by_key)}
    missing = sorted(k for k in must if not by_key.get(k) and k not in superseded)
    for key in missing:
        note("missing", _key(key))
    forbidden = [k for k in obs.expectations.never if by_key.get(k)]
    for key in forbidden:
        note("forbidden", _key(key))

    rows = {(r.task_name, r.fire_time) for r in obs.runs}
    # a summary row stands for every fire of its task from fire_time to last_fire_time, and a
    # row that carries a gap for the fires from missed_from to its own
    spans = [r for r in obs.runs if r.last_fire_time or r.missed_from]

    def has_row(k: Key) -> bool:
        return k in rows or any(k[0] == r.task_name and r.records(k[1]) for r in spans)

    dropped = [
        k
        for k in obs.expectations.may | obs.expectations.never
        if not by_key.get(k) and not has_row(k)
    ]
    for key in dropped:
        note("dropped", _key(key))

    duplicated = allowed = 0
    for key, execs in by_key.items():
        if key not in owed or len(execs) < 2:
            continue
        ordered = sorted(execs, key=lambda e: (e.attempt, e.at))
        for prev, nxt in itertools.pairwise(ordered):
            duplicated += 1
            if _allowed(prev, nxt, obs):
                allowed += 1
            else:
                note("duplicated", f"{_key(key)}: {_ex(prev)} then {_ex(nxt)}")

    stale = _stale(obs, runs_by_id, by_key, note)
    failovers, unexplained = _takeovers(obs, runs_by_id, note)
    backwards = _backwards(obs, note)
    lateness = [
        (ex.at - obs.clock_offsets_s.get(ex.node, 0.0) - ex.fire_time.timestamp()) * 1000
        for key in owed
        for ex in by_key.get(key, [])[:1]
        if ex.attempt == 1
    ]
    return Report(
        scenario=obs.scenario,
        db=obs.db,
        window_s=round(obs.window.seconds, 1),
        expected=len(must),
        run=sum(1 for k in owed if by_key.get(k)),
        missing=len(missing),
        duplicated=duplicated,
        duplicated_allowed=allowed,
        stale_accepted=stale,
        unexplained_takeovers=unexplained,
        forbidden_runs=len(forbidden),
        silently_dropped=len(dropped),
        chain_violations=chain_bad,
        next_fire_backwards=backwards,
        max_failover_s=round(max(failovers), 3) if failovers else None,
        failover_bound_s=obs.failover_bound_s,
        lateness_p99_ms=round(_p99(lateness), 1) if lateness else None,
        died=list(obs.died),
        stuck=list(obs.stuck),
        faults=[f"{f.kind}@{f.target}({f.seconds:.1f}s)" for f in obs.faults],
        examples=dict(examples),
        superseded=len(superseded),
    )


def check(report: Report) -> list[str]:
    """The invariants *report* breaks, each in a sentence with examples; empty when none."""
    ex = report.examples
    out = []
    if report.missing:
        out.append(f"lost fires: {report.missing} expected fires never ran, e.g. {ex['missing']}")
    bad_dups = report.duplicated - report.duplicated_allowed
    if bad_dups:
        out.append(
            f"duplicates without a crash or long pause behind them: {bad_dups}, "
            f"e.g. {ex['duplicated']}"
        )
    if report.stale_accepted:
        out.append(
            f"writes accepted from fenced holders: {report.stale_accepted}, e.g. {ex['stale']}"
        )
    if report.unexplained_takeovers:
        out.append(
            f"runs taken over from a node that was neither crashed nor paused past the dead "
            f"threshold: {report.unexplained_takeovers}, e.g. {ex['takeover']}"
        )
    if (
        report.max_failover_s is not None
        and report.failover_bound_s is not None
        and report.max_failover_s > report.failover_bound_s + FAILOVER_SLACK_S
    ):
        out.append(
            f"failover took {report.max_failover_s:.2f}s, over the documented bound "
            f"{report.failover_bound_s:.2f}s (+{FAILOVER_SLACK_S}s slack), e.g. {ex['failover']}"
        )
    if report.died:
        out.append(f"node processes died unexpectedly: {report.died}")
    if report.stuck:
        out.append(f"rows left stuck after the faults stopped: {report.stuck[:_EXAMPLES]}")
    if report.next_fire_backwards:
        out.append(
            f"next fire times went backwards {report.next_fire_backwards} times, "
            f"e.g. {ex['backwards']}"
        )
    if report.chain_violations:
        out.append(f"chain steps not run once per parent success: {ex['chain']}")
    if report.forbidden_runs:
        out.append(f"fires ran that must not: {report.forbidden_runs}, e.g. {ex['forbidden']}")
    if report.silently_dropped:
        out.append(
            f"fires dropped silently (neither run nor a row): {report.silently_dropped}, "
            f"e.g. {ex['dropped']}"
        )
    return out


# -- the parts of build ----------------------------------------------------------------------


def _superseded(key: Key, obs: Observation, ran: Mapping[Key, list[Execution]]) -> bool:
    """Whether fire *key* has a MISSED row (or lies in a summary row's span) saying that a
    later fire of its task was due first, and a later fire of its task ran."""
    name, fire = key
    marked = any(r.task_name == name and superseded(r, fire) for r in obs.runs)
    return marked and any(k[0] == name and k[1] > fire and execs for k, execs in ran.items())


def superseded(row: HistoryRow, fire: datetime) -> bool:
    """Whether *row* records *fire* MISSED because a later fire of its task was due first:
    a MISSED row (or summary) that says so, or a fire of the gap the row carries (the
    planner passes a fire over only for a later one, the row's own, due)."""
    if row.carries(fire):
        return True
    return (
        row.status == RunStatus.MISSED and SUPERSEDED in (row.error_msg or "") and row.records(fire)
    )


def _allowed(prev: Execution, nxt: Execution, obs: Observation) -> bool:
    """A re-run is allowed after a takeover fault of the node that ran the earlier attempt."""
    if nxt.attempt <= prev.attempt:
        return False
    return any(
        f.target == prev.node
        and f.lets_peers_take_over(obs.dead_threshold_s)
        and f.start <= nxt.at - obs.clock_offsets_s.get(nxt.node, 0.0)
        for f in obs.faults
    )


def _stale(
    obs: Observation,
    runs_by_id: Mapping[int, HistoryRow],
    by_key: Mapping[Key, list[Execution]],
    note: _Note,
) -> int:
    stale = 0
    successes = Counter(
        (r.task_name, r.fire_time, r.pid) for r in obs.runs if r.status == RunStatus.SUCCESS
    )
    for (task, fire, pid), count in successes.items():
        if count > 1:
            stale += count - 1
            note("stale", f"{task}@{fire.isoformat()} pid={pid}: {count} SUCCESS rows")
    attempts = {(r.task_name, r.fire_time, r.pid, r.attempt): r for r in obs.runs}
    for r in obs.runs:
        after = attempts.get((r.task_name, r.fire_time, r.pid, r.attempt + 1))
        if r.status == RunStatus.SUCCESS and after and after.triggered_by == Trigger.RECOVERY:
            stale += 1
            note("stale", f"run {r.id} is SUCCESS yet was taken over by run {after.id}")
    for execs in by_key.values():
        for ex in execs:
            row = runs_by_id.get(ex.run_id)
            if row is None or row.status != RunStatus.SUCCESS:
                continue
            if row.node_id != ex.node or row.attempt != ex.attempt:
                stale += 1
                where = f"{row.node_id}#{row.attempt}"
                note("stale", f"run {row.id} SUCCESS as {where}, ran as {_ex(ex)}")
            elif not ex.finished:
                stale += 1
                note("stale", f"run {row.id} SUCCESS but its job never finished ({_ex(ex)})")
    return stale


def _takeovers(
    obs: Observation, runs_by_id: Mapping[int, HistoryRow], note: _Note
) -> tuple[list[float], int]:
    """Failover seconds of each explained takeover, and the count of unexplained ones."""
    began = {ex.run_id: ex for ex in obs.executions}
    attempts = {(r.task_name, r.fire_time, r.pid, r.attempt): r for r in obs.runs}
    failovers = []
    unexplained = 0
    for r in obs.runs:
        if r.triggered_by != Trigger.RECOVERY:
            continue
        prev = attempts.get((r.task_name, r.fire_time, r.pid, r.attempt - 1))
        holder = prev.node_id if prev else None
        causes = [
            f
            for f in obs.faults
            if f.target == holder
            and f.lets_peers_take_over(obs.dead_threshold_s)
            and f.start <= r.create_time.timestamp() + 0.5
        ]
        if not causes:
            unexplained += 1
            note("takeover", f"run {r.id} ({r.task_name}@{r.fire_time.isoformat()}) from {holder}")
            continue
        ex = began.get(r.id)
        if ex is None:
            continue  # never began: a missing fire or a stuck row says so
        cause = max(causes, key=lambda f: f.start)
        since = max(cause.start, r.fire_time.timestamp())
        seconds = ex.at - obs.clock_offsets_s.get(ex.node, 0.0) - since
        failovers.append(seconds)
        note("failover", f"{seconds:.2f}s: {cause.kind}@{holder} -> run {r.id} on {ex.node}")
    return failovers, unexplained


def _backwards(obs: Observation, note: _Note) -> int:
    count = 0
    for task, samples in obs.next_fire_samples.items():
        latest: datetime | None = None
        for at, value in samples:
            if value is None:
                continue
            if latest is not None and value < latest:
                count += 1
                went = f"{latest.isoformat()} -> {value.isoformat()}"
                note("backwards", f"{task}: {went} at {at:.2f}")
            latest = value if latest is None else max(latest, value)
    return count


def _chains(obs: Observation, must: set[Key], note: _Note) -> int:
    """Add the child fires owed to *must*; count children that ran more than once per
    parent run (in the table) or without a successful parent run."""
    chains = obs.expectations.chains
    if not chains:
        return 0
    runs_by_id = {r.id: r for r in obs.runs}
    bad = 0
    for child, parent in chains.items():
        for r in obs.runs:
            ok = r.status == RunStatus.SUCCESS and r.fire_time in obs.window
            if r.task_name == parent and ok:
                must.add((child, r.fire_time))
        per_parent = Counter(
            r.pid for r in obs.runs if r.task_name == child and r.triggered_by == Trigger.PARENT
        )
        for pid, count in per_parent.items():
            parent_run = runs_by_id.get(pid) if pid is not None else None
            if count > 1:
                bad += 1
                note("chain", f"{child}: {count} runs for parent run {pid}")
            if parent_run is None or parent_run.status != RunStatus.SUCCESS:
                bad += 1
                note("chain", f"{child}: a run for parent run {pid}, which did not succeed")
    return bad


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def _key(key: Key) -> str:
    return f"{key[0]}@{key[1].isoformat()}"


def _ex(ex: Execution) -> str:
    return f"run {ex.run_id} attempt {ex.attempt} on {ex.node}"
