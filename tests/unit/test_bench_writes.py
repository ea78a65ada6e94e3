"""``easyjob.bench.writes``: the nodes' rows by store write named by kind of write."""

from __future__ import annotations

from easyjob.bench.writes import rows_by_kind


def test_rows_by_write_are_named_by_kind_in_a_runs_order() -> None:
    counters = {
        "rows_by_write.advance_tasks.easy_job_task_detail.PENDING": 10.0,
        "rows_by_write.advance_task.easy_job_task_detail.MISSED": 4.0,
        "rows_by_write.advance_tasks.easy_job_task.": 3.0,
        "rows_by_write.claim_started_runs.easy_job_task_detail.": 6.0,
        "rows_by_write.claim_runs.easy_job_task_detail.": 2.0,
        "rows_by_write.runs_running.easy_job_task_detail.": 2.0,
        "rows_by_write.runs_success.easy_job_task_detail.": 7.0,
        "rows_by_write.run_failed.easy_job_task_detail.": 1.0,
        "rows_by_write.miss_pending.easy_job_task_detail.": 5.0,
        "rows_by_write.heartbeat.easy_job_node.": 9.0,
        "rows_by_write.runs_success.easy_job_task.": 1.0,  # not a table the kind names
        "rows_written.easy_job_task": 3.0,  # not by write: left out
    }
    found = rows_by_kind(counters)
    assert list(found.items()) == [
        ("fire insert", 10),
        ("gap summary insert", 4),
        ("task-row advance", 3),
        ("claim", 2),
        ("start", 2),
        ("claim-and-start", 6),
        ("end", 8),
        ("miss_pending", 5),
        ("other", 10),
    ]
