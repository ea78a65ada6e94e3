"""The one list of database backends that ``db_url`` tests run on, and a way to narrow it."""

from __future__ import annotations

import pytest

BACKENDS = ("sqlite", "postgresql", "mariadb")
SERVER_BACKENDS = ("postgresql", "mariadb")
#: PostgreSQL behind PgBouncer in transaction pooling mode: the store tests run on it too
#: (tests/store/conftest.py), so every store statement is checked through the pooler.
POOLED = "pgbouncer"
ALL_BACKENDS = (*BACKENDS, POOLED)


def backend_params(backends: tuple[str, ...] = BACKENDS) -> list[object]:
    """Parameters for ``db_backend``: ids are the backend names, each marked with its name."""
    return [pytest.param(b, marks=getattr(pytest.mark, b), id=b) for b in backends]


def only_backends(*backends: str) -> pytest.MarkDecorator:
    """Run a ``db_url``/``db_server`` test on these backends only.

    ``@only_backends(*SERVER_BACKENDS)`` for fault tests that need a server process.
    """
    unknown = set(backends) - set(ALL_BACKENDS)
    if unknown:
        raise ValueError(f"unknown backends {sorted(unknown)}; known: {ALL_BACKENDS}")
    return pytest.mark.parametrize("db_backend", backend_params(backends), indirect=True)
