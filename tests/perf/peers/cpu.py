"""CPU seconds of processes from ``/proc`` (Linux), for the peer benchmark's window figures."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["children", "proc_cpu", "tree_cpu"]

_TICK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()  # fields from the 3rd (state) on


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) of a live process; 0.0 if it is gone."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / _TICK if fields else 0.0


def tree_cpu(pid: int) -> float:
    """CPU seconds of a server: its own, its live children's, and its exited children's."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    total = sum(int(x) for x in fields[11:15]) / _TICK  # utime stime cutime cstime
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            child = _stat_fields(int(entry.name))
            if child and child[1] == str(pid):
                total += (int(child[11]) + int(child[12])) / _TICK
    return total


def children(parent: int, marker: str) -> list[int]:
    """Live child processes of *parent* whose command line contains *marker*."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if not fields or fields[1] != str(parent):
            continue
        try:
            argv = Path(f"/proc/{entry.name}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in argv:
            found.append(int(entry.name))
    return sorted(found)
