"""Task shapes shared by the chaos jobs (node side) and the scenarios (checker side)."""

from __future__ import annotations

TICK_CRON = "* * * * * *"
MISFIRE_POLICIES = ("fire_once", "skip", "catch_up")
#: child -> parent
CHAINS = {"chain_b": "chain_a", "chain_c": "chain_a", "chain_d": "chain_b"}
DST_ZONE = "Europe/Berlin"
#: Tasks in Europe/Berlin around its transitions (at 01:00 UTC on the last Sunday of March,
#: local 02:00-02:59:59 does not exist; on the last Sunday of October it begins again).
DST_TASKS = {
    "dst-every5": "*/5 * * * * *",  # straight through both transitions
    "dst-hour2": "*/10 * 2 * * *",  # spring: the whole gap is one fire; autumn: first pass only
    "dst-0200": "0 0 2 * * *",  # spring: at the transition; autumn: once
}
