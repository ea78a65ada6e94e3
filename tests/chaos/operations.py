"""Faults that deployments and jobs cause (issue 12), as actions of :mod:`tests.chaos.runner`.

- :func:`deploy`: a node of a rolling deploy, stopped gracefully and started again with other
  code (here: another environment, e.g. another cron text for the ticks);
- :func:`poison`: a job that kills its process (``os._exit(1)``), triggered once; the node it
  kills is logged as a ``crash`` and started again, as an operator's supervisor would.
"""

from __future__ import annotations

import time

from easyjob.core.records import HistoryRow
from easyjob.core.states import RunStatus
from tests.chaos.faults import Fault
from tests.chaos.runner import Action, Play, sigterm
from tests.cluster.harness import wait_until

__all__ = ["PoisonOutcome", "deploy", "expect_tick_cron", "poison"]


def deploy(node_id: str, env: dict[str, str]) -> Action:
    """SIGTERM *node_id* (exit code 0 checked, logged as ``sigterm``: no duplicate and no
    takeover is allowed for it), then start it again under the same id with *env*."""
    stop = sigterm(node_id)

    def act(play: Play) -> None:
        stop(play)
        play.start(node_id, env)
        play.wait_live(node_id)

    return act


def expect_tick_cron(expr: str) -> Action:
    """Wait until every ``tick-N`` row holds cron *expr* (the node that started last wins; a
    node may be live a moment before it registered its tasks)."""

    def act(play: Play) -> None:
        ticks = {f"tick-{i}" for i in range(play.scenario.ticks)}

        def holds() -> bool:
            crons = {t.name: t.cron_expr for t in play.store.tasks.all() if t.name in ticks}
            return set(crons) == ticks and set(crons.values()) == {expr}

        wait_until(f"every tick row to hold {expr!r}", holds, play.deadline())

    return act


class PoisonOutcome:
    """What :func:`poison` saw: the nodes it killed, in order, and the run that ended."""

    def __init__(self) -> None:
        self.killed: list[tuple[str, int | None]] = []  # (node id, exit code)
        self.failed: HistoryRow | None = None


def poison(outcome: PoisonOutcome, backoff_s: float = 0.0, task: str = "poison") -> Action:
    """Trigger *task* once; each time its job begins on a node (its first attempt), wait
    for that node to exit, log a ``crash`` of that node from the moment the job began, and
    start the node again after *backoff_s* (a supervisor's restart delay); return once the
    run ended FAILED (recorded in *outcome*). A node restarted at once takes its
    predecessor's run back itself; one restarted after the dead threshold finds it taken
    over by a peer. Either runs it again in a child process (a recovered run always is),
    which dies instead of the node."""

    def act(play: Play) -> None:
        play.store.tasks.trigger(task)
        handled: set[int] = set()

        def ended() -> HistoryRow | None:
            # read before the ledger: every job that began before the run ended is then seen
            failed = play.store.history.runs(task=task, status=RunStatus.FAILED)
            for ex in play.executions():
                if ex.task != task or ex.run_id in handled:
                    continue
                handled.add(ex.run_id)
                if ex.attempt > 1:  # a recovered run, in a child: its node stays up
                    continue
                node = play.expect_exit(ex.node)
                code = node.wait(play.deadline())
                play.faults.add(
                    Fault("crash", ex.node, ex.at, time.time(), f"{task} run {ex.run_id}")
                )
                outcome.killed.append((ex.node, code))
                time.sleep(backoff_s)
                play.start(ex.node)
                play.wait_live(ex.node)
            return failed[0] if failed else None

        outcome.failed = wait_until(f"the {task} run to end FAILED", ended, 3 * play.deadline())

    return act
