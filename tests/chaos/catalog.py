"""Task shapes shared by the chaos jobs (node side) and the scenarios (checker side)."""

from __future__ import annotations

TICK_CRON = "* * * * * *"
MISFIRE_POLICIES = ("fire_once", "skip", "catch_up")
#: child -> parent
CHAINS = {"chain_b": "chain_a", "chain_c": "chain_a", "chain_d": "chain_b"}
DST_ZONE = "Europe/Berlin"
#: Tasks in Europe/Berlin around its transitions (on 2026-03-29 at 01:00 UTC 02:00 local
#: does not exist; on 2026-10-25 at 01:00 UTC local 02:00-02:59:59 begins again).
DST_TASKS = {
    "dst-every5": "*/5 * * * * *",  # straight through both transitions
    "dst-hour2": "*/10 * 2 * * *",  # spring: the whole gap is one fire; autumn: first pass only
    "dst-0200": "0 0 2 * * *",  # spring: at the transition; autumn: once
}
