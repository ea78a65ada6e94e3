"""The dashboard's actions over real HTTP, in this process, on each backend: off by default,
behind a login, CSRF-checked, sessions that expire, and each recorded in the audit log;
cancel also against a live node process's sleeping job."""

from __future__ import annotations

import contextlib
import http.cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from easyjob.clock import FakeClock
from easyjob.core.admission import Catalog
from easyjob.core.records import TaskSpec
from easyjob.core.states import RunStatus, TaskStatus
from easyjob.observe.http import HttpServer
from easyjob.store import Store
from easyjob.web.app import Dashboard
from easyjob.web.auth import Access, hash_password, verify_password
from tests.cli.conftest import register, start_manual_run
from tests.cluster.harness import Cluster, process_gone, wait_until

TOKEN = "s3cret-token-for-tests"
HOSTILE = '<script>alert("x")</script>'
ESCAPED = "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;"


@dataclass
class Browser:
    """A cookie-keeping HTTP client of one dashboard."""

    base: str
    opener: urllib.request.OpenerDirector

    def get(self, path: str) -> tuple[int, str]:
        return self._send(urllib.request.Request(self.base + path))

    def post(self, path: str, **form: str) -> tuple[int, str]:
        data = urllib.parse.urlencode(form).encode()
        return self._send(urllib.request.Request(self.base + path, data=data, method="POST"))

    def csrf(self, path: str = "/tasks") -> str:
        found = re.search(r'name="csrf" value="([^"]+)"', self.get(path)[1])
        assert found, "no form carries a CSRF token: not logged in?"
        return found.group(1)

    def _send(self, request: urllib.request.Request) -> tuple[int, str]:
        try:
            with self.opener.open(request, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()


def _serve(dashboard: Dashboard) -> Iterator[Browser]:
    server = HttpServer(("127.0.0.1", 0), dashboard.wsgi(), name="dashboard-test")
    server.start()
    jar = http.cookiejar.CookieJar()
    try:
        yield Browser(
            server.url, urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        )
    finally:
        server.close()


@pytest.fixture
def seeded(store: Store) -> Store:
    """A live node that declares ``greet`` (accepts ``who``) and allows ``jobs:report``; a
    FAILED run of ``greet``."""
    tasks = {"greet": "tests.jobs:noop", HOSTILE: "tests.jobs:noop"}
    register(store, "node-a", catalog=Catalog(tasks, frozenset({"jobs:report"})))
    spec = TaskSpec(name="greet", func="tests.jobs:noop", cron="0 0 1 1 *", accepts=("who",))
    store.tasks.upsert([spec, TaskSpec(name=HOSTILE, func="tests.jobs:noop")])
    failed = start_manual_run(store, "greet")
    assert store.runs.fail(failed, "boom", retry_in=None)
    return store


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def acting(seeded: Store, clock: FakeClock) -> Iterator[Browser]:
    access = Access(token=TOKEN, users={"ops": hash_password("correct horse")}, session_s=600)
    yield from _serve(Dashboard(seeded, refresh_s=0, access=access, clock=clock))


@pytest.fixture
def read_only(seeded: Store) -> Iterator[Browser]:
    yield from _serve(Dashboard(seeded, refresh_s=0))


def test_read_only_by_default_shows_no_form_and_refuses_every_post(
    read_only: Browser, seeded: Store
) -> None:
    for page in ("/", "/tasks", "/runs", "/task?name=greet", "/audit"):
        status, body = read_only.get(page)
        assert status == 200 and 'method="post"' not in body, page
    assert "read-only here" in read_only.get("/login")[1]
    for path in ("/login", "/act/trigger", "/act/pause", "/act/schedule-add"):
        status, body = read_only.post(path, task="greet", password=TOKEN)
        assert status == 403 and "the dashboard is read-only here" in body, path
    assert [r.status for r in seeded.history.runs(task="greet")] == [RunStatus.FAILED]
    assert seeded.audit.entries() == []


def test_without_a_session_or_its_csrf_token_nothing_is_done(
    acting: Browser, seeded: Store
) -> None:
    status, body = acting.post("/act/pause", task="greet", csrf="guess")
    assert status == 403 and "log in first" in body
    status, body = acting.post("/login", password="wrong-token-xxxxxxxx")
    assert status == 403 and "wrong user or password" in body
    status, _ = acting.post("/login", user="ops", password="wrong")
    assert status == 403
    assert acting.post("/login", password=TOKEN)[0] == 200
    status, body = acting.post("/act/pause", task="greet")  # the session, not the form's token
    assert status == 403 and "CSRF token is missing or wrong" in body
    assert acting.post("/act/pause", task="greet", csrf="x" * 43)[0] == 403
    assert seeded.tasks.get("greet").status == TaskStatus.ACTIVE
    entries = seeded.audit.entries()
    assert [(e.actor, e.action, e.result) for e in reversed(entries)] == [
        ("anonymous", "pause", "refused"),
        ("token", "login", "refused"),
        ("ops", "login", "refused"),
        ("token", "login", "ok"),
        ("token", "pause", "refused"),
        ("token", "pause", "refused"),
    ]
    assert all(e.detail is None or "password" not in e.detail for e in entries)


def test_each_action_acts_and_is_recorded(acting: Browser, seeded: Store) -> None:
    assert acting.post("/login", user="ops", password="correct horse")[0] == 200
    csrf = acting.csrf("/task?name=greet")

    status, body = acting.post("/act/trigger", task="greet", kwargs='{"who": "ann"}', csrf=csrf)
    assert status == 200 and "triggered greet now: run" in body, body
    at = (seeded.now() + timedelta(hours=1)).replace(microsecond=0)
    status, _ = acting.post("/act/trigger", task="greet", at=at.isoformat(), csrf=csrf)
    assert status == 200
    planned = seeded.history.runs(task="greet", started=False)
    assert {r.fire_time for r in planned} >= {at}
    assert {tuple(sorted((r.kwargs or {}).items())) for r in planned} >= {(("who", "ann"),)}

    assert acting.post("/act/pause", task="greet", csrf=csrf)[0] == 200
    assert seeded.tasks.get("greet").status == TaskStatus.PAUSED
    assert acting.post("/act/resume", task="greet", csrf=csrf)[0] == 200
    assert seeded.tasks.get("greet").status == TaskStatus.ACTIVE

    (failed,) = seeded.history.runs(task="greet", status=RunStatus.FAILED)
    status, body = acting.post("/act/rerun", run=str(failed.id), csrf=csrf)
    assert status == 200 and f"run {failed.id} runs again as run" in body

    form = {"task": "nightly", "func": "jobs:report", "every": "90m", "csrf": csrf}
    assert acting.post("/act/schedule-add", **form)[0] == 200
    assert seeded.tasks.get("nightly").every_ms == 90 * 60_000
    assert acting.post("/act/schedule-set", task="nightly", cron="0 3 * * *", csrf=csrf)[0] == 200
    assert seeded.tasks.get("nightly").cron_expr == "0 3 * * *"
    assert acting.post("/act/schedule-remove", task="nightly", csrf=csrf)[0] == 200
    assert seeded.tasks.get("nightly").status == TaskStatus.FINISHED

    status, body = acting.post("/act/schedule-add", task="x", func="jobs:nope", csrf=csrf)
    assert status == 400 and "function &#39;jobs:nope&#39; cannot run" in body
    forced = {"task": "x", "func": "jobs:nope", "force": "1", "csrf": csrf}
    assert acting.post("/act/schedule-add", **forced)[0] == 200

    done = [(e.actor, e.action, e.target, e.result) for e in reversed(seeded.audit.entries())]
    assert done == [
        ("ops", "login", None, "ok"),
        ("ops", "trigger", "greet", "ok"),
        ("ops", "trigger", "greet", "ok"),
        ("ops", "pause", "greet", "ok"),
        ("ops", "resume", "greet", "ok"),
        ("ops", "rerun", f"run {failed.id}", "ok"),
        ("ops", "schedule-add", "nightly", "ok"),
        ("ops", "schedule-set", "nightly", "ok"),
        ("ops", "schedule-remove", "nightly", "ok"),
        ("ops", "schedule-add", "x", "refused"),
        ("ops", "schedule-add", "x", "ok"),
    ]
    entry = seeded.audit.entries()[-2]  # the first trigger
    assert entry.detail == {"kwargs": '{"who": "ann"}', "task": "greet"}
    assert entry.remote == "127.0.0.1" and entry.at <= seeded.now()
    page = acting.get("/audit")[1]
    assert page.count('class="audit result-') == len(done)


HOSTILE_FORMS = [
    ("/act/trigger", {"task": HOSTILE, "kwargs": '{"who": "' + HOSTILE.replace('"', "'") + '"}'}),
    ("/act/trigger", {"task": "greet", "kwargs": HOSTILE}),
    ("/act/trigger", {"task": "greet", "at": HOSTILE}),
    ("/act/pause", {"task": HOSTILE + "-missing"}),
    ("/act/resume", {"task": HOSTILE + "-missing"}),
    ("/act/rerun", {"run": HOSTILE}),
    ("/act/cancel", {"run": HOSTILE}),
    ("/act/schedule-add", {"task": HOSTILE + "2", "func": HOSTILE, "every": HOSTILE}),
    ("/act/schedule-set", {"task": HOSTILE, "cron": HOSTILE}),
    ("/act/schedule-remove", {"task": HOSTILE}),
    ("/login", {"user": HOSTILE, "password": HOSTILE}),
]


def test_hostile_input_in_every_form_is_refused_or_kept_as_text(
    acting: Browser, seeded: Store
) -> None:
    assert acting.post("/login", password=TOKEN)[0] == 200
    csrf = acting.csrf()
    tasks_before = sorted(t.name for t in seeded.tasks.all())
    for path, form in HOSTILE_FORMS:
        if path != "/login":
            form = {**form, "csrf": csrf}
        status, body = acting.post(path, **form)
        assert status in (200, 400, 403), (path, status)
        assert "<script" not in body.lower(), path
    assert sorted(t.name for t in seeded.tasks.all()) == tasks_before  # nothing added
    audit = acting.get("/audit")[1]
    assert "<script" not in audit.lower() and ESCAPED in audit
    results = [e.result for e in seeded.audit.entries()]
    assert results.count("refused") >= len(HOSTILE_FORMS) - 1


def test_a_session_expires(acting: Browser, seeded: Store, clock: FakeClock) -> None:
    assert acting.post("/login", password=TOKEN)[0] == 200
    csrf = acting.csrf()
    clock.advance(599)
    assert acting.post("/act/pause", task="greet", csrf=csrf)[0] == 200
    clock.advance(2)
    status, body = acting.post("/act/resume", task="greet", csrf=csrf)
    assert status == 403 and "log in first (or the session expired)" in body
    assert seeded.tasks.get("greet").status == TaskStatus.PAUSED


def test_passwords_are_salted_scrypt_hashes() -> None:
    first, second = hash_password("pw"), hash_password("pw")
    assert first != second and first.startswith("scrypt$16384$8$1$")
    assert verify_password("pw", first) and not verify_password("pW", first)
    assert not verify_password("pw", "scrypt$bad")
    with pytest.raises(ValueError, match="at least 16 characters"):
        Access(token="short")
    with pytest.raises(ValueError, match="need a token or at least one user"):
        Access()


def _planned(store: Store, hours: int) -> int:
    """A manual run of ``greet`` written *hours* ahead: PENDING."""
    return store.tasks.trigger("greet", at=store.now() + timedelta(hours=hours))


def _claimed(store: Store) -> int:
    """A run of ``greet`` written an hour ahead and CLAIMED by ``node-a`` (waiting there)."""
    run_id = _planned(store, 1)
    horizon = store.now() + timedelta(days=1)
    (claimed,) = store.runs.claim(
        "node-a", [c for c in store.runs.pending(horizon, 100) if c.id == run_id]
    )
    return claimed.id


def _statuses(store: Store, *run_ids: int) -> list[RunStatus]:
    by_id = {r.id: r.status for r in store.history.runs(ids=list(run_ids))}
    return [by_id[i] for i in run_ids]


def test_cancel_a_pending_a_claimed_and_a_running_run_then_rerun_it(
    acting: Browser, seeded: Store
) -> None:
    pending, claimed = _planned(seeded, 2), _claimed(seeded)
    running = start_manual_run(seeded, "greet").id
    assert acting.post("/login", user="ops", password="correct horse")[0] == 200
    runs_page = acting.get("/runs")[1]
    for run_id in (pending, claimed, running):  # the started one above, the others upcoming
        assert f'id="cancel-{run_id}"' in runs_page, run_id
        assert f'id="rerun-{run_id}"' not in runs_page, run_id
    assert f'id="cancel-{running}"' in acting.get("/task?name=greet")[1]
    run_page = acting.get(f"/run?id={running}")[1]
    assert f'id="cancel-{running}"' in run_page and 'id="run-status">RUNNING<' in run_page
    csrf = acting.csrf(f"/run?id={running}")

    status, body = acting.post("/act/cancel", run=str(pending), csrf=csrf)
    assert status == 200 and f"run {pending} CANCELLED (was PENDING: it never starts)" in body
    status, body = acting.post("/act/cancel", run=str(claimed), csrf=csrf)
    assert status == 200 and f"run {claimed} CANCELLED (was CLAIMED: it never starts)" in body
    status, body = acting.post("/act/cancel", run=str(running), csrf=csrf)
    assert (
        status == 200
        and (
            f"run {running} CANCELLED (was RUNNING on node node-a: it stops the job within a poll)"
        )
        in body
    )
    assert _statuses(seeded, pending, claimed, running) == [RunStatus.CANCELLED] * 3
    (row,) = seeded.history.runs(ids=[running])
    assert row.error_msg == "cancelled on request (was RUNNING)" and row.end_time is not None

    status, body = acting.post("/act/cancel", run=str(running), csrf=csrf)  # ended: refused
    assert status == 400 and f"run {running} had ended CANCELLED: not cancelled" in body
    (failed,) = seeded.history.runs(task="greet", status=RunStatus.FAILED)
    status, body = acting.post("/act/cancel", run=str(failed.id), csrf=csrf)
    assert status == 400 and f"run {failed.id} had ended FAILED: not cancelled" in body
    assert _statuses(seeded, failed.id) == [RunStatus.FAILED]

    page = acting.get(f"/run?id={running}")[1]  # a cancelled run: re-run, no cancel
    assert f'id="rerun-{running}"' in page and f'id="cancel-{running}"' not in page
    assert f'id="rerun-{running}"' in acting.get("/runs?status=CANCELLED")[1]
    status, body = acting.post("/act/rerun", run=str(running), csrf=csrf)
    assert status == 200 and f"run {running} runs again as run " in body
    (again,) = seeded.history.runs(ids=[int(body.split("runs again as run ")[1].split("<")[0])])
    assert again.task_name == "greet" and again.status == RunStatus.PENDING

    done = [(e.actor, e.action, e.target, e.result) for e in reversed(seeded.audit.entries())]
    assert done == [
        ("ops", "login", None, "ok"),
        ("ops", "cancel", f"run {pending}", "ok"),
        ("ops", "cancel", f"run {claimed}", "ok"),
        ("ops", "cancel", f"run {running}", "ok"),
        ("ops", "cancel", str(running), "refused"),
        ("ops", "cancel", str(failed.id), "refused"),
        ("ops", "rerun", f"run {running}", "ok"),
    ]
    assert seeded.audit.entries()[-2].detail == {"run": str(pending)}


def test_cancel_is_refused_without_credentials(
    acting: Browser, read_only: Browser, seeded: Store
) -> None:
    running = start_manual_run(seeded, "greet").id
    pending = _planned(seeded, 2)
    for page in ("/runs", f"/run?id={running}", "/task?name=greet"):
        for client in (acting, read_only):
            assert f'id="cancel-{running}"' not in client.get(page)[1], page
    status, body = read_only.post("/act/cancel", run=str(running))
    assert status == 403 and "the dashboard is read-only here" in body
    status, body = acting.post("/act/cancel", run=str(running), csrf="guess")
    assert status == 403 and "log in first" in body
    assert acting.post("/login", password=TOKEN)[0] == 200
    status, body = acting.post("/act/cancel", run=str(pending))
    assert status == 403 and "CSRF token is missing or wrong" in body
    status, body = acting.post("/act/cancel", run=str(pending), csrf="x" * 43)
    assert status == 403 and "CSRF token is missing or wrong" in body
    assert _statuses(seeded, running, pending) == [RunStatus.RUNNING, RunStatus.PENDING]
    refused = [(e.actor, e.action, e.target, e.result) for e in reversed(seeded.audit.entries())]
    assert refused == [
        ("anonymous", "cancel", str(running), "refused"),
        ("token", "login", None, "ok"),
        ("token", "cancel", str(pending), "refused"),
        ("token", "cancel", str(pending), "refused"),
    ]


HOSTILE_RUN_IDS = [
    (HOSTILE, "invalid run id"),
    ("", "the form needs a run"),
    ("0", "invalid run id"),
    ("-1", "invalid run id"),
    ("1.0", "invalid run id"),
    ("1e3", "invalid run id"),
    ("\u00b2", "invalid run id"),  # a digit to str.isdigit, not to int()
    ("\u0661", "invalid run id"),  # ARABIC-INDIC DIGIT ONE: int() reads it as 1
    ("1 OR 1=1", "invalid run id"),
    ("9223372036854775808", "invalid run id"),  # one past a BIGINT
    ("9" * 5000, "characters)"),  # past int()'s digit limit, and cut in the message
    ("9223372036854775807", "no run with id 9223372036854775807"),
]


def test_a_hostile_run_id_is_refused_and_cancels_nothing(acting: Browser, seeded: Store) -> None:
    running = start_manual_run(seeded, "greet").id
    assert acting.post("/login", password=TOKEN)[0] == 200
    csrf = acting.csrf()
    for text, why in HOSTILE_RUN_IDS:
        status, body = acting.post("/act/cancel", run=text, csrf=csrf)
        assert status == 400 and why in body, (text[:30], status, body[-400:])
        assert "<script" not in body.lower() and len(body) < 5000
    assert _statuses(seeded, running) == [RunStatus.RUNNING]
    assert [r.status for r in seeded.history.runs(task="greet", limit=10)] == [
        RunStatus.RUNNING,
        RunStatus.FAILED,
    ]
    entries = seeded.audit.entries()
    assert [e.result for e in entries if e.action == "cancel"] == ["refused"] * len(HOSTILE_RUN_IDS)
    audit = acting.get("/audit")[1]
    assert "<script" not in audit.lower() and ESCAPED in audit
    marked = seeded.tasks.trigger(HOSTILE, kwargs=None)
    status, body = acting.get(f"/run?id={marked}")  # a task named like markup: text
    assert status == 200 and ESCAPED in body and "<script" not in body.lower()
    assert f'id="cancel-{marked}"' in body
    for text in (HOSTILE, "0", "-1", "99999999999999999999", "9" * 100, "\u0661"):
        status, body = acting.get("/run?id=" + urllib.parse.quote(text))
        assert status == 200 and "No run with id" in body and "<script" not in body.lower()


@pytest.mark.cluster
def test_cancel_a_sleeping_job_of_a_live_node_over_http(db_url: str, tmp_path: Path) -> None:
    with Cluster(db_url, tmp_path, env={"EASYJOB_TEST_CANCEL": "1"}) as cluster:
        node = cluster.start("node-0")
        cluster.wait_live()
        store = cluster.store
        sleeping = store.tasks.trigger("c_sleep")
        pending = store.tasks.trigger("c_sleep", at=store.now() + timedelta(hours=1))

        def pid_line() -> list[str]:
            return [e.event for e in cluster.ledger() if e.run_id == sleeping]

        (started,) = wait_until("the sleeping job to start", pid_line, 30)
        pid = int(started.removeprefix("pid-"))
        access = Access(token=TOKEN, session_s=600)
        with contextlib.closing(_serve(Dashboard(store, refresh_s=0, access=access))) as serving:
            client = next(serving)
            status, body = client.post("/act/cancel", run=str(sleeping), csrf="guess")
            assert status == 403 and "log in first" in body
            assert client.post("/login", password=TOKEN)[0] == 200
            csrf = client.csrf(f"/run?id={sleeping}")
            status, body = client.post("/act/cancel", run=str(sleeping), csrf=csrf)
            assert status == 200 and f"run {sleeping} CANCELLED (was RUNNING on node node-0" in body
            status, body = client.post("/act/cancel", run=str(pending), csrf=csrf)
            assert status == 200 and f"run {pending} CANCELLED (was PENDING" in body
        wait_until("the sleeping child to be killed", lambda: process_gone(pid), 15)
        wait_until(
            "the node to log it",
            lambda: (
                f"run {sleeping} of c_sleep cancelled on request: its child process killed"
                in node.log()
            ),
            15,
        )
        assert _statuses(store, sleeping, pending) == [RunStatus.CANCELLED] * 2
        assert pid_line() == [started]  # killed: it never wrote "finished"
        assert [(e.action, e.result) for e in reversed(store.audit.entries())] == [
            ("cancel", "refused"),
            ("login", "ok"),
            ("cancel", "ok"),
            ("cancel", "ok"),
        ]
        cluster.stop_all()
        assert node.wait(10) == 0
        assert [e for e in cluster.ledger() if e.run_id == pending] == []
