"""Each strategy's share of runs per node, on a real cluster, before and after a node dies."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from easyjob.core.states import RunStatus
from tests.cluster.harness import Cluster, Entry, duplicates, get, samples, total, wait_until
from tests.cluster.test_cluster import expected_fires
from tests.rig.servers import free_port

pytestmark = pytest.mark.cluster

TICKS = 30
NODES = ("node-0", "node-1", "node-2")


def _window(cluster: Cluster, seconds: int) -> tuple[datetime, datetime]:
    start = cluster.store.db.now().replace(microsecond=0) + timedelta(seconds=2)
    end = start + timedelta(seconds=seconds - 1)
    wanted = {(f"tick-{i}", f) for i in range(TICKS) for f in expected_fires(start, end)}

    def done() -> bool:
        ran = {(r.task_name, r.fire_time) for r in cluster.runs() if r.status == RunStatus.SUCCESS}
        return wanted <= ran

    try:
        wait_until(f"{len(wanted)} fires to succeed", done, seconds + 30)
    except AssertionError as err:
        rows = [r for r in cluster.runs() if (r.task_name, r.fire_time) in wanted]
        ended = Counter((r.status.value, r.node_id) for r in rows)
        raise AssertionError(f"{err}; the window's fires by (status, node): {ended}") from None
    return start, end


def _in(entries: list[Entry], start: datetime, end: datetime) -> list[Entry]:
    return [e for e in entries if start <= e.fire_time <= end and e.task.startswith("tick-")]


def _shares(entries: list[Entry]) -> dict[str, float]:
    counts = Counter(e.node for e in entries)
    return {node: counts[node] / len(entries) for node in sorted(counts)}


def _run(
    strategy: str,
    db_url: str,
    tmp_path: Path,
    weights: dict[str, int] | None = None,
) -> tuple[Cluster, list[Entry], list[Entry]]:
    cluster = Cluster(db_url, tmp_path, ticks=TICKS)
    try:
        return _phases(cluster, strategy, weights)
    except BaseException:
        cluster.close()  # a failed wait must not leave the node processes running
        raise


def _phases(
    cluster: Cluster, strategy: str, weights: dict[str, int] | None
) -> tuple[Cluster, list[Entry], list[Entry]]:
    for node in NODES:
        cluster.start(node, strategy=strategy, weight=str((weights or {}).get(node, 1)))
    cluster.wait_live()
    first = _window(cluster, 12)
    cluster.nodes["node-2"].kill()
    killed = cluster.store.db.now()
    wait_until(
        "node-2 to drop out of the live set",
        lambda: (
            "node-2" not in {n.node_id for n in cluster.store.nodes.live(timedelta(seconds=1))[1]}
        ),
        10,
    )
    second = _window(cluster, 8)
    cluster.stop_all()
    entries = cluster.ledger()
    assert (
        duplicates(
            [(e.task, e.fire_time) for e in entries if e.fire_time > killed + timedelta(seconds=2)]
        )
        == {}
    )
    phase1, phase2 = _in(entries, *first), _in(entries, *second)
    print(
        f"\n{strategy} on {cluster.db_url.split(':')[0]}: shares with 3 nodes {_shares(phase1)}, "
        f"after node-2 died {_shares(phase2)}"
    )
    cluster.close()
    return cluster, phase1, phase2


def _survivors_share(phase2: list[Entry], at_least: float) -> None:
    shares = _shares(phase2)
    assert set(shares) == {"node-0", "node-1"}, shares
    assert min(shares.values()) >= at_least, shares


def test_id_hash_keeps_each_task_on_its_node(db_url: str, tmp_path: Path) -> None:
    _, phase1, phase2 = _run("id_hash", db_url, tmp_path)
    owners: dict[str, set[str]] = {}
    for entry in phase1:
        owners.setdefault(entry.task, set()).add(entry.node)
    assert all(len(nodes) == 1 for nodes in owners.values()), owners
    assert len(set().union(*owners.values())) == 3
    _survivors_share(phase2, 0.2)


def test_weight_splits_runs_by_weight(db_url: str, tmp_path: Path) -> None:
    weights = {"node-0": 1, "node-1": 2, "node-2": 3}
    _, phase1, phase2 = _run("weight", db_url, tmp_path, weights)
    shares = _shares(phase1)
    for node, weight in weights.items():
        assert abs(shares[node] - weight / 6) <= 0.1, shares
    s2 = _shares(phase2)
    assert abs(s2["node-0"] - 1 / 3) <= 0.12, s2


def test_least_count_spreads_every_batch(db_url: str, tmp_path: Path) -> None:
    _, phase1, phase2 = _run("least_count", db_url, tmp_path)
    shares = _shares(phase1)
    assert set(shares) == set(NODES) and min(shares.values()) >= 0.2, shares
    _survivors_share(phase2, 0.3)


def test_default_runs_everything_once_and_survives_a_death(db_url: str, tmp_path: Path) -> None:
    _, phase1, phase2 = _run("default", db_url, tmp_path)
    assert len(phase1) == TICKS * 12 and len(phase2) == TICKS * 8
    _survivors_share(phase2, 0.1)


def test_default_nodes_at_half_load_claim_their_home_runs_without_racing(
    db_url: str, tmp_path: Path
) -> None:
    """Four nodes that keep up each claim their own share of the runs (run id mod 4), ahead
    of its time: claim races are rare (a node late by the steal delay), where before every
    node read every run already due and tried it, losing about one claim per run.

    At default settings (not the harness's fast ones: with a dead threshold of 1 s, a busy
    test machine drops a node from the live set now and then, and nodes that disagree on
    the live set deal runs differently), counted once every node sees the four."""
    ports = {f"node-{i}": free_port() for i in range(4)}

    def scrape(name: str) -> dict[str, float]:
        return {n: total(samples(f"http://127.0.0.1:{p}"), name) for n, p in ports.items()}

    with Cluster(db_url, tmp_path, ticks=TICKS) as cluster:
        for node, port in ports.items():
            cluster.start_with(node, {"http": f"127.0.0.1:{port}"}, fast=False)

        def agreed() -> bool:
            for node in cluster.nodes.values():
                if not node.alive:
                    raise AssertionError(f"node {node.node_id} exited:\n{node.log()[-3000:]}")
            try:  # 503 while the node waits for the database's tables
                if any(get(f"http://127.0.0.1:{p}/metrics")[0] != 200 for p in ports.values()):
                    return False
            except OSError:  # a node's endpoint is not up yet
                return False
            return set(scrape("easyjob_live_nodes").values()) == {len(ports)}

        wait_until("every node to see the four", agreed, 60)
        lost, won = scrape("easyjob_claims_lost_total"), scrape("easyjob_claims_total")
        _window(cluster, 10)
        lost = {n: v - lost[n] for n, v in scrape("easyjob_claims_lost_total").items()}
        won = {n: v - won[n] for n, v in scrape("easyjob_claims_total").items()}
        live = scrape("easyjob_live_nodes")
        cluster.stop_all()
    print(f"\nclaims won {won}, lost {lost}")
    assert set(live.values()) == {len(ports)}, live
    assert sum(won.values()) >= TICKS * 10, won
    # Racing for on-time runs, as before home runs, loses about one claim per run (390 lost
    # for 360 won, SQLite). Healthy nodes lose none (tests/node/test_home_runs.py checks it
    # exactly, on a fake clock); here a node stalled past the steal delay by a busy machine
    # loses the runs it then tries, and its thieves some to it: 0 in 11 trials out of 12
    # with two busy loops on the two cores beside the nodes, 55 for 365 in the twelfth.
    assert sum(lost.values()) <= sum(won.values()) // 4, (won, lost)
