"""LeftForWorkers: how many workers must come free before a thread that left work for want
of one runs again, counting every worker freed since it read how many were free."""

from __future__ import annotations

from easyjob.node.freed import LeftForWorkers


def test_nothing_left_every_free_is_enough_and_none_is_awaited() -> None:
    left = LeftForWorkers(64)
    assert left.enough_freed(1)
    assert not left.enough()


def test_it_waits_for_as_many_as_it_left_or_an_eighth_of_the_workers() -> None:
    left = LeftForWorkers(64)  # an eighth: 8
    left.leave(3)
    assert [left.enough_freed(1) for _ in range(3)] == [False, False, True]
    left.leave(100)
    assert [left.enough_freed(2) for _ in range(4)] == [False, False, False, True]
    assert left.enough()


def test_workers_freed_after_the_round_read_them_count_towards_its_wait() -> None:
    left = LeftForWorkers(16)  # an eighth: 2
    mark = left.mark()  # the round reads the workers free: none
    left.enough_freed(1)  # two jobs return before it leaves its runs
    left.enough_freed(1)
    left.leave(5, mark)
    assert left.enough()  # run again at once
    late = LeftForWorkers(16)
    late.enough_freed(2)  # freed before the round's read: the read counted them
    late.leave(5, late.mark())
    assert not late.enough()
    assert late.enough_freed(2)


def test_a_leave_without_a_mark_counts_from_the_leave() -> None:
    left = LeftForWorkers(16)
    left.enough_freed(5)
    left.leave(1)
    assert not left.enough()
    assert left.enough_freed(1)
