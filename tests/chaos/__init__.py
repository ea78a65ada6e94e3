"""The reliability suite: real faults against real node processes, judged by one checker.

See docs/reliability.md. ``ledger`` reads what the jobs wrote outside the database,
``expected`` computes the fires the contract owes (with croniter, not easyjob's cron code),
``faults`` injects and records faults, ``runner`` plays a declarative scenario, ``checker``
turns what happened into a :class:`~tests.chaos.checker.Report` and ``check`` lists the
invariants it breaks.
"""
