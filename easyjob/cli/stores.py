"""Opening the store for a command: in a module of its own, so that a command that only
writes (``trigger``, ``schedule``, ``cancel``) imports the store and not every other
command's modules."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from easyjob.store import Store

__all__ = ["existing_store"]


@contextmanager
def existing_store(url: str, *, read_only: bool = False) -> Iterator[Store]:
    """The store at *url*, whose schema must exist already (it is never created here)."""
    store = Store.open(url, read_only=read_only)
    try:
        yield store
    finally:
        store.close()
