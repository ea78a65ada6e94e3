"""The dashboard in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``
through selenium), served by a real ``easyjob dashboard`` process next to a live node.

A missing browser skips these tests locally and fails them under ``CI`` (``make deps``
installs it). With ``EASYJOB_SCREENSHOTS=DIR`` each page's screenshot is written there
(docs/img holds the ones docs/monitoring.md shows); otherwise under the test's tmp_path.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from selenium.common.exceptions import (
    NoAlertPresentException,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.web.conftest import HOSTILE, NODE, gone, shoot

pytestmark = pytest.mark.cluster


def test_dashboard_in_a_real_browser(browser: WebDriver, dashboard: str, tmp_path: Path) -> None:
    driver = browser

    def cells(table: str, column: int) -> list[str]:
        rows = driver.find_elements(By.CSS_SELECTOR, f"table#{table} tbody tr")
        return [r.find_elements(By.TAG_NAME, "td")[column].text for r in rows]

    def submit() -> None:
        """Apply the filters and wait for the new page (the old one's elements go stale)."""
        old = driver.find_element(By.TAG_NAME, "table")
        driver.find_element(By.ID, "filter-apply").click()
        WebDriverWait(driver, 20).until(lambda _: gone(old))

    def no_script_ran() -> None:
        assert driver.find_elements(By.TAG_NAME, "script") == []
        with pytest.raises(NoAlertPresentException):
            driver.switch_to.alert.text  # noqa: B018 (reading it is the check)

    driver.get(dashboard + "/")
    assert driver.title == "easyjob · overview"
    nodes = dict(zip(cells("nodes", 0), cells("nodes", 1), strict=True))
    assert nodes[NODE] == "RUNNING"
    bars = driver.find_elements(By.CSS_SELECTOR, "#chart svg rect")
    assert bars, "the chart shows no runs"
    assert "no luck <img src=x onerror=alert(1)>" in cells("failures", 7)[0]
    no_script_ran()
    shoot(driver, "overview", tmp_path)

    driver.get(dashboard + "/tasks")
    names = cells("tasks", 0)
    assert {HOSTILE, "always_fails", "slow"} <= set(names)  # the hostile name, as text
    registered = dict(zip(names, cells("tasks", 9), strict=True))
    assert registered[HOSTILE] == "yes"  # declared by the live node's code
    no_script_ran()
    shoot(driver, "tasks", tmp_path)
    box = driver.find_element(By.ID, "filter-q")
    box.send_keys("script")
    submit()
    assert cells("tasks", 0) == [HOSTILE]

    driver.get(dashboard + "/runs")
    assert {HOSTILE, "always_fails"} <= set(cells("runs", 1))
    no_script_ran()
    shoot(driver, "runs", tmp_path)
    Select(driver.find_element(By.ID, "filter-status")).select_by_value("FAILED")
    Select(driver.find_element(By.ID, "filter-node")).select_by_value(NODE)
    submit()
    assert "status=FAILED" in driver.current_url
    statuses = cells("runs", 2)
    assert statuses and set(statuses) == {"FAILED"}
    assert set(cells("runs", 1)) == {"always_fails"}
    assert set(cells("runs", 6)) == {NODE}
    task_box = driver.find_element(By.ID, "filter-task")
    task_box.clear()
    task_box.send_keys(HOSTILE)
    Select(driver.find_element(By.ID, "filter-status")).select_by_value("")
    submit()
    hostile_runs = cells("runs", 1)
    assert hostile_runs and set(hostile_runs) == {HOSTILE}
    no_script_ran()

    driver.get(dashboard + "/failures")
    assert set(cells("failures", 1)) == {"always_fails"}
    details = driver.find_element(By.CSS_SELECTOR, "table#failures td.error details")
    details.find_element(By.TAG_NAME, "summary").click()
    assert "ValueError: no luck <img src=x onerror=alert(1)>" in details.text
    no_script_ran()
    shoot(driver, "failures", tmp_path)
