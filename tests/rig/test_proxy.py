"""The TCP proxy does what each mode says, against the real servers."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from tests.rig.backends import SERVER_BACKENDS, only_backends
from tests.rig.proxy import Proxy

pytestmark = only_backends(*SERVER_BACKENDS)

metadata = sa.MetaData()
probe = sa.Table(
    "probe",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", sa.String(50), nullable=False),
)
other = sa.Table("other", metadata, sa.Column("id", sa.Integer, primary_key=True))


@pytest.fixture
def direct(db_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(db_url)
    metadata.create_all(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def proxy(db_url: str, direct: sa.Engine) -> Iterator[Proxy]:
    with Proxy.for_url(db_url) as proxy:
        yield proxy


@pytest.fixture
def proxied(proxy: Proxy, db_url: str) -> Iterator[sa.Engine]:
    """An engine through the proxy; timeouts long enough that a hang is a hang."""
    engine = sa.create_engine(proxy.url(db_url), pool_size=2, max_overflow=0)
    yield engine
    engine.dispose()


def names(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(probe.c.name).order_by(probe.c.id)).scalars())


def insert(engine: sa.Engine, row_id: int, name: str = "x") -> None:
    with engine.begin() as conn:
        conn.execute(probe.insert().values(id=row_id, name=name))


class Background:
    """Run *fn* on a thread; remember its result or error."""

    def __init__(self, fn: object) -> None:
        self.result: object = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: object) -> None:
        try:
            self.result = fn()  # type: ignore[operator]
        except BaseException as err:
            self.error = err

    def join(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()


def test_pass_through_reads_and_writes(proxied: sa.Engine, direct: sa.Engine) -> None:
    insert(proxied, 1, "through the proxy")
    assert names(direct) == ["through the proxy"]
    assert names(proxied) == ["through the proxy"]


def test_commit_is_sent_as_the_watcher_expects(
    db_backend: str, proxy: Proxy, proxied: sa.Engine
) -> None:
    """Captured, not assumed: psycopg 3 sends COMMIT as a simple-query message and its
    statements as Parse messages; PyMySQL sends both as COM_QUERY."""
    insert(proxied, 1)
    seen = proxy.stats.seen
    if db_backend == "postgresql":
        assert ("Q", b"COMMIT") in seen
        assert any(kind == "P" and text.startswith(b"INSERT INTO probe") for kind, text in seen)
    else:
        assert ("COM_QUERY", b"COMMIT") in seen
        assert any(
            kind == "COM_QUERY" and text.startswith(b"INSERT INTO probe") for kind, text in seen
        )
    assert proxy.stats.commits >= 1


def test_latency_slows_each_round_trip(proxy: Proxy, proxied: sa.Engine) -> None:
    insert(proxied, 1)  # a pooled connection, so only round trips are timed
    proxy.latency(0.3)
    started = time.monotonic()
    with proxied.connect() as conn:
        conn.execute(sa.select(1)).scalar()
    assert time.monotonic() - started >= 0.3
    proxy.heal()
    assert names(proxied) == ["x"]


def test_blackhole_hangs_without_error_and_heal_completes(
    proxy: Proxy, proxied: sa.Engine, direct: sa.Engine
) -> None:
    insert(proxied, 1, "before")
    proxy.blackhole()
    pooled = Background(lambda: insert(proxied, 2, "during"))
    fresh = sa.create_engine(proxied.url, pool_size=1, max_overflow=0)
    connect = Background(lambda: names(fresh))
    assert not pooled.join(1.5), "a write through a blackholed proxy returned"
    assert not connect.join(0.1), "a new connection through a blackholed proxy returned"
    assert pooled.error is None and connect.error is None
    assert names(direct) == ["before"]  # nothing reached the server
    assert proxy.open_connections >= 2  # the sockets stay open
    proxy.heal()
    assert pooled.join(10) and connect.join(10)
    assert pooled.error is None and connect.error is None
    assert names(direct) == ["before", "during"]
    fresh.dispose()


def test_refuse_resets_open_connections_and_refuses_new_ones(
    proxy: Proxy, proxied: sa.Engine, direct: sa.Engine
) -> None:
    insert(proxied, 1)
    assert proxy.open_connections == 1
    proxy.refuse()
    assert proxy.open_connections == 0
    with pytest.raises(sa_exc.OperationalError), proxied.connect() as conn:
        conn.execute(sa.select(1))  # the pooled connection was reset
    fresh = sa.create_engine(proxied.url)
    with pytest.raises(sa_exc.OperationalError):
        fresh.connect()
    fresh.dispose()
    proxy.heal()
    insert(proxied, 2)
    assert len(names(direct)) == 2


def test_reply_lost_after_commit_the_row_is_there_and_the_client_got_an_error(
    proxy: Proxy, proxied: sa.Engine, direct: sa.Engine
) -> None:
    proxy.lose_commit_replies(count=1)
    with pytest.raises(sa_exc.OperationalError):
        insert(proxied, 1, "committed")
    assert names(direct) == ["committed"]
    assert proxy.stats.replies_lost == 1
    assert b"INSERT INTO probe" in proxy.stats.lost_transactions[0]
    insert(proxied, 2, "next")  # only the next commit was affected
    assert names(direct) == ["committed", "next"]


def test_every_kth_commit_loses_its_reply(
    proxy: Proxy, proxied: sa.Engine, direct: sa.Engine
) -> None:
    proxy.lose_commit_replies(every=3)
    failed = []
    for i in range(6):
        try:
            insert(proxied, i)
        except sa_exc.OperationalError:
            failed.append(i)
    assert failed == [2, 5]
    assert len(names(direct)) == 6


def test_match_limits_lost_replies_to_matching_transactions(
    proxy: Proxy, proxied: sa.Engine, direct: sa.Engine
) -> None:
    proxy.lose_commit_replies(count=1, match=r"INSERT INTO probe")
    with proxied.begin() as conn:
        conn.execute(other.insert().values(id=1))  # not matching: its reply arrives
    with pytest.raises(sa_exc.OperationalError):
        insert(proxied, 1)
    with direct.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(other)).scalar() == 1
    assert names(direct) == ["x"]
