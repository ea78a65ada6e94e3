"""Ids as the database hands them out, and how nodes deal by them. (pure)

Nodes split work by ids without talking: a run's home (``default``), a task's node
(``id_hash``) and a task's planner are ``ordinal mod n``, n the nodes among which it is dealt.
An id's *ordinal* is its place in the order the database hands ids out: the id divided by
the *step* between two ids, 1 except on a MariaDB Galera cluster, whose members hand out
ids the cluster's size apart (``auto_increment_increment``, set by
``wsrep_auto_increment_control``; a database's step is ``Store.id_step``). Dealt by the id
itself, ids 3 apart fell on one node of 3 (``python -m tests.perf.galera_homes``: 30 runs'
homes 0/30/0), ids 2 apart on every other node of 4. Consecutive ordinals split evenly: the
fires of one instant are written together (``easyjob.store.tasks``), so each node of n is
home to an n-th of them, give or take one.
"""

from __future__ import annotations

__all__ = ["dealt", "ordinal"]


def ordinal(db_id: int, step: int = 1) -> int:
    """*db_id*'s place in the order ids are handed out ``step`` apart: ``id div step``."""
    return db_id // step


def dealt(db_id: int, nodes: int, step: int = 1, offset: int = 0) -> int:
    """The rank (0 to *nodes* - 1) of the node *db_id* is dealt to among *nodes*: its
    :func:`ordinal` plus *offset* (a sharded task's shard), ``mod nodes``."""
    return (ordinal(db_id, step) + offset) % nodes
