"""A real node process that leaves a history worth showing (successes of a task named like
markup, failures whose error text is markup) on each backend; a real headless Chromium; and
``easyjob dashboard`` processes beside them, read-only or with the actions on."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

from easyjob.core.states import RunStatus
from tests.cluster.harness import Cluster, wait_until
from tests.rig.servers import free_port

HOSTILE = '<script>alert("easyjob")</script>'
NODE = "web-node-1"
#: The login token of the dashboard with actions (``acting_dashboard``).
TOKEN = "browser-test-token-0123456789"

CHROMIUM = "/usr/bin/chromium"
DRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)


@pytest.fixture
def cluster(db_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """One live node with a few seconds of history: SUCCESS runs of HOSTILE, FAILED runs of
    ``always_fails``."""
    with Cluster(db_url, tmp_path, env={"EASYJOB_TEST_WEB": "1"}) as cluster:
        cluster.start(NODE)
        cluster.wait_live(NODE)

        def history() -> bool:
            runs = cluster.runs()
            done = {(r.task_id, r.status) for r in runs}
            statuses = {status for _, status in done}
            return RunStatus.SUCCESS in statuses and RunStatus.FAILED in statuses

        wait_until("successes and failures in the history", history, 30)
        yield cluster


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    missing = [path for path in (CHROMIUM, DRIVER) if not shutil.which(path)]
    if missing:
        _unavailable(f"no headless browser: {', '.join(missing)} missing (make deps installs it)")

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def serve_dashboard(cluster: Cluster, tmp_path: Path, *options: str) -> Iterator[str]:
    """``easyjob dashboard`` with *options* as its own process; yields its base URL."""
    port = free_port()
    name = f"dashboard-{port}.log"
    log = (tmp_path / name).open("wb")
    argv = [sys.executable, "-m", "easyjob", "dashboard", "--db", cluster.db_url]
    argv += ["--http", f"127.0.0.1:{port}", "--refresh", "0", *options]
    proc = subprocess.Popen(argv, env=cluster.env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError((tmp_path / name).read_text())
        try:
            with urllib.request.urlopen(base + "/static/style.css", timeout=2):
                return True
        except OSError:
            return False

    try:
        wait_until("the dashboard to answer", up, 30)
        yield base
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
        log.close()


@pytest.fixture
def dashboard(cluster: Cluster, tmp_path: Path) -> Iterator[str]:
    """A read-only ``easyjob dashboard`` (the default); yields its base URL."""
    yield from serve_dashboard(cluster, tmp_path)


@pytest.fixture
def acting_dashboard(cluster: Cluster, tmp_path: Path) -> Iterator[str]:
    """``easyjob dashboard --token-file`` (actions on, login with TOKEN); its base URL."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    yield from serve_dashboard(cluster, tmp_path, "--token-file", str(token_file))


def shoot(driver: WebDriver, name: str, tmp_path: Path) -> None:
    """Save a screenshot as ``dashboard-NAME.png`` in ``$EASYJOB_SCREENSHOTS`` (else
    *tmp_path*)."""
    folder = Path(os.environ.get("EASYJOB_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(folder / f"dashboard-{name}.png"))


def gone(element: WebElement) -> bool:
    """Whether *element* left the document (its page was replaced). Asked mid-navigation,
    chromedriver may say so with an "unknown error" instead of a stale reference."""
    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as err:
        if "does not belong to the document" in str(err):
            return True
        raise
    return False
