"""PostgreSQL multi-host URLs against a real primary and its streaming standby: the forms
docs/deployment.md lists reach the primary whichever host comes first, and follow a promoted
standby; the form psycopg cannot read is refused naming the forms that work."""

from __future__ import annotations

import pytest

from easyjob.errors import DatabaseURLError
from easyjob.store import RetryPolicy, Store
from easyjob.store.database import Database
from easyjob.store.engine import normalize_url
from tests.rig.servers import APP_PASSWORD, APP_USER, PostgresServer, PostgresStandby
from tests.store.conftest import every_second

USER = f"{APP_USER}:{APP_PASSWORD}"


def _forms(first: int, second: int) -> dict[str, str]:
    hosts = "127.0.0.1"
    return {
        "host per parameter": f"postgresql://{USER}@/app?host={hosts}:{first}"
        f"&host={hosts}:{second}&target_session_attrs=read-write",
        "hosts and ports apart": f"postgresql://{USER}@/app?host={hosts},{hosts}"
        f"&port={first},{second}&target_session_attrs=read-write",
    }


def _server(db: Database) -> tuple[int, bool]:
    sql = "SELECT inet_server_port(), pg_is_in_recovery()"
    port, in_recovery = db.read("server", lambda c: c.exec_driver_sql(sql).one())
    return int(port), bool(in_recovery)


def test_postgresql_multi_host_urls_reach_the_primary_and_follow_a_promotion(
    postgres_primary_and_standby: tuple[PostgresServer, PostgresStandby],
) -> None:
    primary, standby = postgres_primary_and_standby
    for first, second in ((primary.port, standby.port), (standby.port, primary.port)):
        for form, url in _forms(first, second).items():
            db = Database.open(url, connect_timeout_s=3)
            try:
                assert _server(db) == (primary.port, False), (form, first)
            finally:
                db.dispose()
    url = _forms(primary.port, standby.port)["host per parameter"]
    store = Store.open(url, create=True, retry=RetryPolicy(deadline_s=30))
    try:
        store.tasks.upsert([every_second("before")])
        primary.kill()
        standby.promote()
        store.tasks.upsert([every_second("after")])  # the same pool, retried onto the new primary
        assert _server(store.db) == (standby.port, False)
        assert {t.name for t in store.tasks.all()} == {"before", "after"}
    finally:
        store.close()
    for form, url in _forms(primary.port, standby.port).items():
        db = Database.open(url, connect_timeout_s=3)
        try:
            assert _server(db) == (standby.port, False), form
        finally:
            db.dispose()


def test_a_host_list_with_ports_in_one_value_is_refused_naming_the_forms_that_work() -> None:
    url = "postgresql://u@/app?host=10.0.0.1:5432,10.0.0.2:5432"
    with pytest.raises(DatabaseURLError) as err:
        normalize_url(url)
    assert str(err.value) == (
        "unsupported database URL 'postgresql://u@/app?host=10.0.0.1%3A5432%2C10.0.0.2%3A5432': "
        "host='10.0.0.1:5432,10.0.0.2:5432' lists hosts with their ports in one value, which "
        "psycopg reads as one host name: give each its own parameter (?host=H1:P1&host=H2:P2) "
        "or the hosts and the ports apart (?host=H1,H2&port=P1,P2)"
    )
    normalize_url("postgresql://u@/app?host=::1,::2&port=5432,5433")  # IPv6: no port inside
