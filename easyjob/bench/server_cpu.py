"""CPU time of processes on this machine, read from ``/proc`` (Linux only): the bench's nodes
and the database server it runs against, sampled at a trial window's start and end.

A server is found by the port of its URL: the inode of the socket listening there (in
``/proc/net/tcp`` and ``tcp6``) is matched to the ``/proc/PID/fd`` links of each process.
Every reader fails soft: a process that cannot be found or read gives None and a reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

__all__ = ["children", "find_server", "listening_pid", "process_cpu_s", "tree_cpu_s"]

PROC = Path("/proc")
_LISTEN = "0A"  # the TCP state column of a listening socket in /proc/net/tcp
_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306}
_LOOPBACK = {"localhost", "::1", "ip6-localhost"}


def _ticks() -> int:
    return os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first), or None."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def process_cpu_s(pid: int) -> float | None:
    """User plus system CPU seconds of process *pid* (all its threads), or None when gone."""
    fields = _stat(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / _ticks()


def children(pid: int) -> list[int]:
    """The live child processes of *pid*."""
    found = []
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def tree_cpu_s(pid: int) -> float | None:
    """CPU seconds of *pid* and its children: its own user and system time, that of the
    children it has reaped (``cutime`` and ``cstime``: a PostgreSQL backend whose connection
    closed), and that of its live children (a backend per connection); None when gone."""
    fields = _stat(pid)
    if fields is None:
        return None
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    seconds = ticks / _ticks()
    for child in children(pid):
        seconds += process_cpu_s(child) or 0.0  # a child may exit meanwhile
    return seconds


def listening_pid(port: int) -> int | None:
    """The process that listens on TCP *port* (IPv4 or IPv6), or None: none does, or its
    ``/proc/PID/fd`` cannot be read (another user's process, without root)."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    links = {f"socket:[{inode}]" for inode in inodes}
    holders = []
    for entry in PROC.iterdir():
        if entry.name.isdigit() and _holds(entry, links):
            holders.append(int(entry.name))
    # children may inherit the socket: the server is the holder whose parent does not hold it
    for pid in holders:
        fields = _stat(pid)
        if fields is not None and int(fields[1]) not in holders:
            return pid
    return None


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process *pid* listens on (IPv4 or IPv6); empty when none, or when its
    ``/proc/PID/fd`` cannot be read."""
    try:
        links = {os.readlink(fd) for fd in (PROC / str(pid) / "fd").iterdir()}
    except OSError:
        return set()
    inodes = {link[len("socket:[") : -1] for link in links if link.startswith("socket:[")}
    return {port for port, inode in _listening() if inode in inodes}


def _listening_inodes(port: int) -> set[str]:
    return {inode for at, inode in _listening() if at == port}


def _listening() -> Iterator[tuple[int, str]]:
    """Every listening TCP socket (IPv4 and IPv6) as (port, socket inode)."""
    for name in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == _LISTEN:
                yield int(cols[1].rsplit(":", 1)[1], 16), cols[9]


def _holds(proc_dir: Path, links: set[str]) -> bool:
    try:
        for fd in (proc_dir / "fd").iterdir():
            try:
                if os.readlink(fd) in links:
                    return True
            except OSError:
                continue
    except OSError:
        pass
    return False


def find_server(url: str) -> tuple[int | None, str]:
    """The pid of the database server behind *url* when it runs on this machine, else None
    and the reason, e.g. SQLite: its work is done inside the nodes' own processes."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None, f"cannot read the database URL {url!r}"
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return None, "SQLite runs inside the nodes: its CPU is part of theirs"
    if not PROC.joinpath("net", "tcp").exists():
        return None, "no /proc/net/tcp here (Linux only): give --db-pid"
    host = parsed.host or "localhost"
    if host not in _LOOPBACK and not host.startswith("127."):
        return None, f"the database host {host!r} is not loopback: give --db-pid if it runs here"
    port = parsed.port or _DEFAULT_PORTS.get(backend)
    if port is None:
        return None, f"no port in the database URL and none known for {backend!r}: give --db-pid"
    pid = listening_pid(port)
    if pid is None:
        return None, (
            f"no process found listening on port {port} "
            "(or its /proc/PID/fd is not readable by this user): give --db-pid"
        )
    return pid, f"pid {pid}, listening on port {port}"
