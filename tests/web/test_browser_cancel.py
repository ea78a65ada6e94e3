"""Cancelling runs from the dashboard in a real headless Chromium, against a real
``easyjob dashboard --token-file`` process and a live node, on each backend: a running job
in a child process is killed, a pending run never starts, the button is refused without
credentials and with a tampered run id, and a cancelled run can be run again."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from easyjob.core.states import RunStatus
from tests.cluster.harness import Cluster, process_gone, wait_until
from tests.web.conftest import HOSTILE, NODE, TOKEN, shoot
from tests.web.test_browser_actions import _click, _login, _outcome, _tamper

pytestmark = pytest.mark.cluster


@pytest.fixture
def cluster(db_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """One live node declaring the cancel jobs of tests/cluster/jobs.py (``c_sleep`` sleeps
    60 s in a child process and writes its pid to the ledger; ``c_coop``)."""
    with Cluster(db_url, tmp_path, env={"EASYJOB_TEST_CANCEL": "1"}) as cluster:
        cluster.start(NODE)
        cluster.wait_live(NODE)
        yield cluster


def _status(cluster: Cluster, run_id: int) -> RunStatus:
    (run,) = cluster.store.history.runs(ids=[run_id])
    return run.status


def test_cancel_a_running_and_a_pending_run_in_a_real_browser(
    browser: WebDriver, acting_dashboard: str, cluster: Cluster, tmp_path: Path
) -> None:
    driver, base, store = browser, acting_dashboard, cluster.store
    sleeping = store.tasks.trigger("c_sleep")
    pending = store.tasks.trigger("c_coop", at=store.now() + timedelta(hours=1))

    def pid_line() -> list[str]:
        return [e.event for e in cluster.ledger() if e.run_id == sleeping]

    (started,) = wait_until("the sleeping job to start", pid_line, 30)
    pid = int(started.removeprefix("pid-"))
    assert _status(cluster, sleeping) == RunStatus.RUNNING

    # without credentials: no cancel button anywhere, and a stale form is refused
    for page in ("/runs", "/task?name=c_sleep", f"/run?id={sleeping}"):
        driver.get(base + page)
        assert driver.find_elements(By.CSS_SELECTOR, "button.cancel") == [], page
    assert driver.find_element(By.ID, "run-status").text == "RUNNING"
    assert _login(driver, base, TOKEN) == ("Done", "logged in as token")
    driver.get(base + f"/run?id={sleeping}")
    driver.delete_cookie("easyjob_session")
    _click(driver, driver.find_element(By.ID, f"cancel-{sleeping}"))
    assert _outcome(driver) == ("Refused", "log in first (or the session expired)")
    assert _status(cluster, sleeping) == RunStatus.RUNNING and not process_gone(pid)

    # a tampered run id is refused and cancels nothing
    assert _login(driver, base, TOKEN)[0] == "Done"
    for forged, why in ((HOSTILE, "invalid run id"), ("-1", "invalid run id")):
        driver.get(base + f"/run?id={sleeping}")
        _tamper(driver, "/act/cancel", "run", forged)
        _click(driver, driver.find_element(By.ID, f"cancel-{sleeping}"))
        heading, message = _outcome(driver)  # shown as text: no script ran
        assert heading == "Refused" and why in message and forged in message
    assert _status(cluster, sleeping) == RunStatus.RUNNING and not process_gone(pid)

    # the running job, from the Runs page: the run ends CANCELLED and its child is killed
    driver.get(base + "/runs")
    shoot(driver, "runs-cancel", tmp_path)
    assert driver.find_elements(By.ID, f"cancel-{pending}")  # in the upcoming table
    _click(driver, driver.find_element(By.ID, f"cancel-{sleeping}"))
    assert _outcome(driver) == (
        "Done",
        f"run {sleeping} CANCELLED (was RUNNING on node {NODE}: it stops the job within a poll)",
    )
    assert _status(cluster, sleeping) == RunStatus.CANCELLED
    wait_until("the sleeping child to be killed", lambda: process_gone(pid), 15)
    node = cluster.nodes[NODE]
    wait_until(
        "the node to log it",
        lambda: (
            f"run {sleeping} of c_sleep cancelled on request: its child process killed"
            in node.log()
        ),
        15,
    )

    # the pending run, from its own page: it never starts
    driver.get(base + f"/run?id={pending}")
    assert driver.find_element(By.ID, "run-status").text == "PENDING"
    shoot(driver, "run", tmp_path)
    _click(driver, driver.find_element(By.ID, f"cancel-{pending}"))
    assert _outcome(driver) == ("Done", f"run {pending} CANCELLED (was PENDING: it never starts)")
    assert _status(cluster, pending) == RunStatus.CANCELLED

    # a cancelled run offers re-run, not cancel; the re-run is a new run of its task
    driver.get(base + f"/run?id={sleeping}")
    assert driver.find_element(By.ID, "run-status").text == "CANCELLED"
    assert driver.find_elements(By.CSS_SELECTOR, "button.cancel") == []
    driver.get(base + "/runs?status=CANCELLED")
    _click(driver, driver.find_element(By.ID, f"rerun-{pending}"))
    heading, message = _outcome(driver)
    assert heading == "Done" and message.startswith(f"run {pending} runs again as run ")
    (again,) = store.history.runs(ids=[int(message.rsplit(" ", 1)[1])])
    assert again.task_name == "c_coop"
    wait_until(
        "the re-run to start",
        lambda: [e.event for e in cluster.ledger() if e.run_id == again.id] == ["started"],
        30,
    )
    assert store.cancels.cancel(again.id).cancelled  # it runs 60 s unless told

    # every cancel, refused or done, is in the audit log
    driver.get(base + "/audit")
    rows = driver.find_elements(By.CSS_SELECTOR, "table#audit tbody tr")
    found = [[td.text for td in row.find_elements(By.TAG_NAME, "td")] for row in rows]
    cancels = [(row[2], row[4], row[5], row[6]) for row in reversed(found) if row[4] == "cancel"]
    assert cancels == [
        ("anonymous", "cancel", str(sleeping), "refused"),
        ("token", "cancel", HOSTILE, "refused"),
        ("token", "cancel", "-1", "refused"),
        ("token", "cancel", f"run {sleeping}", "ok"),
        ("token", "cancel", f"run {pending}", "ok"),
    ]
    assert {_status(cluster, r) for r in (sleeping, pending)} == {RunStatus.CANCELLED}
    assert [e.event for e in cluster.ledger() if e.run_id == pending] == []
