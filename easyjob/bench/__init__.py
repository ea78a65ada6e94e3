"""``easyjob bench``: real node processes against one database, measured from its tables.

:mod:`~easyjob.bench.trial` runs one trial (N nodes, M no-op tasks on a cron, a duration),
:mod:`~easyjob.bench.metrics` computes the figures from ``easy_job_task_detail`` and the
nodes' counters, :mod:`~easyjob.bench.probe` measures the database's own rate for the claim
pattern, and :mod:`~easyjob.bench.report` prints them.
"""
