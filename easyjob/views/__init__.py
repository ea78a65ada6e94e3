"""The view model under both faces: what the CLI and the dashboard show of nodes, tasks and
runs, and what "a live node can run it" means, decided here once. The CLI renders these
rows as tables or JSON, the dashboard as HTML; neither imports the other.

- :mod:`easyjob.views.read`: the reads that build the rows from a store.
- :mod:`easyjob.views.rows`: the rows and their derived columns.
- :mod:`easyjob.views.code`: which tasks and functions the live nodes' code can run.
- :mod:`easyjob.views.text`: durations, schedules and cancels written for people.
"""

from easyjob.views.code import GONE_AFTER_S, LiveCode, live_code
from easyjob.views.rows import Row, counted, node_rows, records, run_rows, task_rows
from easyjob.views.text import cancel_text, schedule_text, seconds

__all__ = [
    "GONE_AFTER_S",
    "LiveCode",
    "Row",
    "cancel_text",
    "counted",
    "live_code",
    "node_rows",
    "records",
    "run_rows",
    "schedule_text",
    "seconds",
    "task_rows",
]
