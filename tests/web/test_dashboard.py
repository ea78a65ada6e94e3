"""The dashboard over HTTP, in this process: it escapes what the database holds and never
writes to it (every statement it sends is watched)."""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from easyjob.observe.http import HttpServer
from easyjob.store import RetryPolicy, Store
from easyjob.store.schema import node_table
from easyjob.web.app import Dashboard
from tests.cluster.harness import Cluster, get
from tests.web.conftest import HOSTILE, NODE

pytestmark = pytest.mark.cluster

WRITES = re.compile(
    r"^\s*(INSERT|UPDATE|DELETE|REPLACE|MERGE|UPSERT|CREATE|DROP|ALTER|TRUNCATE|GRANT)\b", re.I
)


@pytest.fixture
def read_only_store(cluster: Cluster) -> Iterator[Store]:
    store = Store.open(cluster.db_url, read_only=True, retry=RetryPolicy(deadline_s=0.5))
    try:
        yield store
    finally:
        store.close()


def test_pages_escape_what_they_show_and_send_no_write(read_only_store: Store) -> None:
    sent: list[str] = []
    sa.event.listen(
        read_only_store.db.engine,
        "before_cursor_execute",
        lambda conn, cursor, statement, *rest: sent.append(statement),
    )
    server = HttpServer(("127.0.0.1", 0), Dashboard(read_only_store).wsgi(), name="dashboard-test")
    server.start()
    try:
        base = server.url
        pages = [
            "/",
            "/?window=15m",
            "/tasks",
            "/tasks?q=script",
            "/runs",
            "/runs?status=FAILED&limit=50",
            f"/runs?node={NODE}&task=always_fails",
            "/runs?" + urllib.parse.urlencode({"task": HOSTILE}),
            "/failures",
        ]
        bodies = {}
        for page in pages:
            status, body = get(base + page, timeout=10)
            assert status == 200, (page, body[-2000:])
            bodies[page] = body
        assert get(base + "/nope", timeout=10)[0] == 404
    finally:
        server.close()
    assert sent, "the dashboard read nothing"
    writes = [s for s in sent if WRITES.match(s)]
    assert writes == []

    escaped = "&lt;script&gt;alert(&#34;easyjob&#34;)&lt;/script&gt;"
    for page in ("/tasks", "/tasks?q=script", "/runs"):
        assert escaped in bodies[page], page
    for body in bodies.values():
        assert "<script" not in body.lower()
        assert "<img" not in body.lower()
    (row,) = [r for r in bodies["/tasks"].split("<tr") if f'">{escaped}</a></td>' in r]
    _lag, _pending, succeeded, _failed = re.findall(r'<td class="num">([^<]*)</td>', row)
    assert int(succeeded) >= 1  # the task's successes (the history has some), not blank
    assert "no luck &lt;img src=x onerror=alert(1)&gt;" in bodies["/failures"]
    assert '<meta http-equiv="refresh" content="10">' in bodies["/"]
    assert NODE in bodies["/"]
    assert '<rect x="' in bodies["/"]  # the chart has bars: runs ended in the last hour


def test_the_read_only_store_refuses_writes(read_only_store: Store) -> None:
    with pytest.raises(sa.exc.DBAPIError, match=r"(?i)read.?only"):
        read_only_store.db.write("delete", lambda conn: conn.execute(node_table.delete()))
    _, nodes = read_only_store.nodes.all()
    assert NODE in {n.node_id for n in nodes}
