"""The dashboard's actions in a real headless Chromium, against a real ``easyjob dashboard
--token-file`` process and a live node, on each backend: every action through its form,
its refusal without credentials, and a hostile input in every form (typed into a field,
or written into a hidden one as a tampering user would)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from easyjob.core.states import RunStatus, TaskStatus
from tests.cluster.harness import Cluster
from tests.web.conftest import HOSTILE, TOKEN, gone, shoot

pytestmark = pytest.mark.cluster

REPORT = "tests.cluster.jobs:web_report"


def _no_script_ran(driver: WebDriver) -> None:
    assert driver.find_elements(By.TAG_NAME, "script") == []
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # noqa: B018 (reading it is the check)


def _outcome(driver: WebDriver) -> tuple[str, str]:
    """The result page's heading (Done or Refused) and message."""
    heading = driver.find_element(By.TAG_NAME, "h1").text
    _no_script_ran(driver)
    return heading, driver.find_element(By.ID, "result").text


def _click(driver: WebDriver, element: WebElement) -> None:
    """Click *element* and wait for the page it loads (the old one's elements go stale)."""
    old = driver.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(driver, 20).until(lambda _: gone(old))


def _fill(driver: WebDriver, fields: dict[str, str]) -> None:
    for element_id, value in fields.items():
        box = driver.find_element(By.ID, element_id)
        box.clear()
        box.send_keys(value)


def _tamper(driver: WebDriver, form_action: str, name: str, value: str) -> None:
    """Set the hidden field *name* of the form posting to *form_action* to *value*."""
    driver.execute_script(
        "document.querySelector(`form[action$='${arguments[0]}'] input[name='${arguments[1]}']`)"
        ".value = arguments[2];",
        form_action,
        name,
        value,
    )


def _login(driver: WebDriver, base: str, token: str) -> tuple[str, str]:
    driver.get(base + "/login")
    _fill(driver, {"login-password": token})
    _click(driver, driver.find_element(By.ID, "login-submit"))
    return _outcome(driver)


def test_read_only_dashboard_offers_no_action(
    browser: WebDriver, dashboard: str, cluster: Cluster
) -> None:
    driver = browser
    for page in ("/", "/tasks", "/runs", "/task?name=greet", "/failures"):
        driver.get(dashboard + page)
        assert driver.find_elements(By.CSS_SELECTOR, "form[method=post]") == [], page
        assert driver.find_elements(By.ID, "login") == []
    driver.get(dashboard + "/login")
    assert "read-only here" in driver.find_element(By.ID, "result").text
    assert driver.find_elements(By.ID, "login-form") == []


def test_every_action_and_its_refusal_in_a_real_browser(
    browser: WebDriver, acting_dashboard: str, cluster: Cluster, tmp_path: Path
) -> None:
    driver, base, store = browser, acting_dashboard, cluster.store

    # without credentials: no form, a login link; a wrong token is refused
    driver.get(base + "/task?name=greet")
    assert driver.find_elements(By.ID, "trigger") == []
    assert driver.find_element(By.ID, "login").text == "log in to act"
    assert _login(driver, base, "wrong-token-wrong-token") == ("Log in", "wrong user or password")
    shoot(driver, "login", tmp_path)
    assert _login(driver, base, TOKEN) == ("Done", "logged in as token")

    # trigger now with arguments, and at a time
    driver.get(base + "/task?name=greet")
    shoot(driver, "task", tmp_path)
    _fill(driver, {"trigger-kwargs": '{"who": "ann"}'})
    _click(driver, driver.find_element(By.ID, "trigger-submit"))
    heading, message = _outcome(driver)
    assert heading == "Done" and message.startswith("triggered greet now: run ")
    shoot(driver, "result", tmp_path)
    run_id = int(message.rsplit(" ", 1)[1])
    (run,) = store.history.runs(ids=[run_id])
    assert run.kwargs == {"who": "ann"} and run.task_name == "greet"
    at = (store.now() + timedelta(hours=2)).astimezone(UTC).replace(microsecond=0)
    driver.get(base + "/task?name=greet")
    _fill(driver, {"trigger-at": at.isoformat()})
    _click(driver, driver.find_element(By.ID, "trigger-submit"))
    heading, message = _outcome(driver)
    assert heading == "Done" and "triggered greet at " in message
    (later,) = store.history.runs(ids=[int(message.rsplit(" ", 1)[1])])
    assert later.fire_time == at

    # pause and resume
    driver.get(base + "/task?name=greet")
    _click(driver, driver.find_element(By.ID, "pause"))
    assert _outcome(driver) == ("Done", "greet is PAUSED")
    assert store.tasks.get("greet").status == TaskStatus.PAUSED
    driver.get(base + "/task?name=greet")
    _click(driver, driver.find_element(By.ID, "resume"))
    assert _outcome(driver) == ("Done", "greet is ACTIVE")

    # re-run a failed run
    driver.get(base + "/runs?status=FAILED")
    button = driver.find_elements(By.CSS_SELECTOR, "button.rerun")[0]
    failed_id = int(button.get_attribute("id").removeprefix("rerun-"))
    _click(driver, button)
    heading, message = _outcome(driver)
    assert heading == "Done" and message.startswith(f"run {failed_id} runs again as run ")
    (again,) = store.history.runs(ids=[int(message.rsplit(" ", 1)[1])])
    assert again.task_name == "always_fails"

    # add, change and remove a runtime schedule; a function no live node can run is refused
    driver.get(base + "/tasks")
    _fill(driver, {"add-task": "nightly", "add-func": "tests.cluster.jobs:nope", "add-every": "1h"})
    _click(driver, driver.find_element(By.ID, "add-submit"))
    heading, message = _outcome(driver)
    assert heading == "Refused" and "'tests.cluster.jobs:nope' cannot run" in message
    driver.get(base + "/tasks")
    _fill(driver, {"add-task": "nightly", "add-func": REPORT, "add-every": "1h"})
    shoot(driver, "tasks-add", tmp_path)
    _click(driver, driver.find_element(By.ID, "add-submit"))
    assert _outcome(driver) == ("Done", f"added nightly calling {REPORT}")
    assert store.tasks.get("nightly").every_ms == 3_600_000
    driver.get(base + "/task?name=nightly")
    _fill(driver, {"set-cron": "0 3 * * *"})
    _click(driver, driver.find_element(By.ID, "set-submit"))
    assert _outcome(driver) == ("Done", "changed the schedule of nightly")
    assert store.tasks.get("nightly").cron_expr == "0 3 * * *"
    driver.get(base + "/task?name=nightly")
    _click(driver, driver.find_element(By.ID, "remove"))
    assert _outcome(driver) == ("Done", "removed nightly: it is FINISHED")

    # a hostile input in every form: refused, shown as text, nothing written
    names_before = sorted(t.name for t in store.tasks.all())
    hostile_typed = [
        ("/task?name=greet", {"trigger-kwargs": HOSTILE}, "trigger-submit", "invalid kwargs"),
        ("/task?name=greet", {"trigger-at": HOSTILE}, "trigger-submit", "invalid time"),
        ("/task?name=greet", {"set-cron": HOSTILE}, "set-submit", HOSTILE),
        ("/tasks", {"add-task": HOSTILE, "add-func": HOSTILE}, "add-submit", HOSTILE),
    ]
    for page, fields, submit, shown in hostile_typed:
        driver.get(base + page)
        _fill(driver, fields)
        _click(driver, driver.find_element(By.ID, submit))
        heading, message = _outcome(driver)
        assert heading == "Refused" and shown in message, (fields, message)
    hostile_hidden = [
        ("/task?name=greet", "/act/trigger", "task", "trigger-submit"),
        ("/task?name=greet", "/act/pause", "task", "pause"),
        ("/task?name=greet", "/act/schedule-set", "task", "set-submit"),
        ("/runs?status=FAILED", "/act/rerun", "run", None),
        ("/task?name=greet", "/act/trigger", "csrf", "trigger-submit"),
    ]
    for page, action, field, submit in hostile_hidden:
        driver.get(base + page)
        _tamper(driver, action, field, HOSTILE + "?")  # HOSTILE itself is a task here
        if field == "task" and action == "/act/schedule-set":
            _fill(driver, {"set-every": "1m"})
        target = (
            driver.find_element(By.ID, submit)
            if submit
            else driver.find_elements(By.CSS_SELECTOR, "button.rerun")[0]
        )
        _click(driver, target)
        heading, _ = _outcome(driver)
        assert heading == "Refused", (action, field)
    assert sorted(t.name for t in store.tasks.all()) == names_before
    assert store.tasks.get("greet").status == TaskStatus.ACTIVE

    # a stale form without its session is refused: the cookie is gone
    driver.get(base + "/task?name=greet")
    driver.delete_cookie("easyjob_session")
    _click(driver, driver.find_element(By.ID, "pause"))
    assert _outcome(driver) == ("Refused", "log in first (or the session expired)")
    assert store.tasks.get("greet").status == TaskStatus.ACTIVE

    # the audit page shows every action, who, what and how it ended, as text
    assert _login(driver, base, TOKEN)[0] == "Done"
    driver.get(base + "/audit")
    _no_script_ran(driver)
    rows = driver.find_elements(By.CSS_SELECTOR, "table#audit tbody tr")
    found = [[td.text for td in row.find_elements(By.TAG_NAME, "td")] for row in rows]
    actions = [(row[2], row[4], row[6]) for row in reversed(found)]
    ok = [a for a in actions if a[2] == "ok" and a[1] != "login"]
    assert [a[1] for a in ok] == [
        "trigger", "trigger", "pause", "resume", "rerun",
        "schedule-add", "schedule-set", "schedule-remove",
    ]  # fmt: skip
    assert all(a[0] == "token" for a in ok)
    assert ("anonymous", "pause", "refused") in actions
    assert any(HOSTILE in cell for row in found for cell in row)  # shown as text
    entries = store.audit.entries()
    assert len(entries) == len(found)
    assert all(e.at <= store.now() for e in entries)
    assert all(e.result in ("ok", "refused") for e in entries)
    shoot(driver, "audit", tmp_path)
    assert {r.status for r in store.history.runs(ids=[failed_id])} == {RunStatus.FAILED}
    assert datetime.now(UTC) - entries[0].at < timedelta(minutes=5)
