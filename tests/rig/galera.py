"""A MariaDB Galera cluster on loopback (Debian ``galera-4`` beside ``mariadb-server``).

Each member is a :class:`~tests.rig.servers.MariaDBServer` (same option file, users and
helpers) with the wsrep settings added: row binlog, interleaved auto-increment locks, the
provider, every member's group-communication port in ``wsrep_cluster_address``, its own IST
and rsync SST ports. The first member makes the system tables and bootstraps the cluster
(``--wsrep-new-cluster``, its first start only); the others start empty and copy its data
(SST), and a member restarted after a crash catches up from a peer (IST or SST). A member
is ready when ``wsrep_ready`` is ON. Galera's own timeouts stay at their defaults
(``evs.suspect_timeout`` 5 s: how long a crashed member stalls the cluster).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pymysql

from tests.rig.servers import MariaDBServer, ServerError, free_port

__all__ = ["PROVIDERS", "GaleraCluster", "GaleraMember"]

#: Where Debian (and other distributions) put the Galera 4 provider.
PROVIDERS = (
    "/usr/lib/galera/libgalera_smm.so",
    "/usr/lib/galera-4/libgalera_smm.so",
    "/usr/lib64/galera-4/libgalera_smm.so",
)
#: Counters of conflicts between members: a local transaction failed certification, or
#: was aborted by a replicated one ("brute force"); both reach the client as error 1213.
CONFLICT_COUNTERS = ("wsrep_local_cert_failures", "wsrep_local_bf_aborts")


def _provider() -> str | None:
    return next((p for p in PROVIDERS if Path(p).exists()), None)


class GaleraMember(MariaDBServer):
    """Member *index* of a cluster whose members listen for group communication on
    *gcomm_ports* (this member on ``gcomm_ports[index]``)."""

    backend = "galera"

    def __init__(
        self, index: int, gcomm_ports: Sequence[int], options: Mapping[str, object] | None = None
    ) -> None:
        """*options*: more ``[mysqld]`` settings (e.g. ``wsrep_sync_wait``)."""
        if not 0 <= index < len(gcomm_ports):
            raise ValueError(f"member index {index!r} is not one of {len(gcomm_ports)} members")
        self.index = index
        self._gcomm = list(gcomm_ports)
        self._ist = free_port()
        self._sst = free_port()
        self._bootstrap = index == 0
        self._extra = dict(options or {})
        super().__init__()

    @classmethod
    def missing(cls) -> str | None:
        reason = super().missing()
        if reason:
            return reason
        if _provider() is None:
            return f"Galera provider not found in {', '.join(PROVIDERS)}: install galera-4"
        if shutil.which("rsync") is None or shutil.which("wsrep_sst_rsync") is None:
            return "rsync or wsrep_sst_rsync not found (Galera state transfer): install rsync"
        return None

    def start(self) -> None:
        super().start()
        self._bootstrap = False  # a restart joins the running cluster

    def status(self) -> dict[str, str]:
        """This member's ``wsrep_%`` status variables."""
        with self._cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS LIKE 'wsrep\\_%'")
            return {str(k): str(v) for k, v in cur.fetchall()}

    def bootstrap(self) -> None:
        """Make this member a primary component by itself (``pc.bootstrap``): what an
        operator does when the others are lost and it is to go on alone."""
        with self._cursor() as cur:
            cur.execute("SET GLOBAL wsrep_provider_options = 'pc.bootstrap=YES'")

    def variable(self, name: str) -> str:
        """The global value of system variable *name* on this member."""
        if not name.isidentifier():
            raise ValueError(f"not a system variable name: {name!r}")
        with self._cursor() as cur:
            cur.execute(f"SELECT @@GLOBAL.{name}")
            return str(cur.fetchone()[0])

    def _options(self) -> dict[str, object]:
        address = ",".join(f"127.0.0.1:{p}" for p in self._gcomm)
        gcomm = self._gcomm[self.index]
        provider = (
            f'"gmcast.listen_addr=tcp://127.0.0.1:{gcomm};ist.recv_addr=127.0.0.1:{self._ist};'
            'gcache.size=64M"'
        )
        return {
            **super()._options(),
            "binlog_format": "ROW",
            "default_storage_engine": "InnoDB",
            "innodb_autoinc_lock_mode": 2,
            "wsrep_on": "ON",
            "wsrep_provider": _provider(),
            "wsrep_cluster_name": "easyjob",
            "wsrep_cluster_address": f"gcomm://{address}",
            "wsrep_node_name": f"member-{self.index}",
            "wsrep_node_address": f"127.0.0.1:{gcomm}",
            "wsrep_provider_options": provider,
            "wsrep_sst_method": "rsync",
            "wsrep_sst_receive_address": f"127.0.0.1:{self._sst}",
            **self._extra,
        }

    def _seeds_data(self) -> bool:
        return self.index == 0

    def _argv(self, port: int) -> list[str]:
        argv = [self._mariadbd, f"--defaults-file={self._cnf}", f"--port={port}"]
        if self._bootstrap:  # users are made once; the others copy them
            argv += [f"--init-file={self._init_sql}", "--wsrep-new-cluster"]
        return argv

    def _ping(self, port: int) -> bool:
        try:
            with self._cursor(port, timeout=2) as cur:
                cur.execute("SHOW GLOBAL STATUS LIKE 'wsrep_ready'")
                row = cur.fetchone()
        except pymysql.err.MySQLError:
            return False
        return row is not None and row[1] == "ON"


class GaleraCluster:
    """*size* members started one after the other, each with *options* added to its option
    file; databases are made on the first and replicate. Close it to stop every member and
    remove its data."""

    def __init__(self, size: int = 3, options: Mapping[str, object] | None = None) -> None:
        if size < 1:
            raise ValueError(f"a Galera cluster needs at least one member, not {size!r}")
        gcomm = [free_port() for _ in range(size)]
        self.members: list[GaleraMember] = []
        for i in range(size):
            self.members.append(GaleraMember(i, gcomm, options))

    def start(self) -> None:
        for member in self.members:
            member.start()
        self.wait_size(len(self.members))

    def create_database(self, name: str) -> list[str]:
        """Create *name* (on the first member); its app URL on each member, in order."""
        self.members[0].create_database(name)
        return [m.app_url(name) for m in self.members]

    def wait_size(self, size: int, timeout: float = 60.0, *, among: Sequence[int] = ()) -> float:
        """Wait until every running member (or those of *among*) sees *size* members, all
        synced; return the seconds waited."""
        started = time.monotonic()
        watched = [self.members[i] for i in among] if among else self.members
        while True:
            try:
                states = [m.status() for m in watched if m.running]
            except pymysql.err.MySQLError:
                states = []
            if states and all(
                s.get("wsrep_cluster_size") == str(size)
                and s.get("wsrep_local_state_comment") == "Synced"
                for s in states
            ):
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                seen = [
                    (s.get("wsrep_cluster_size"), s.get("wsrep_local_state_comment"))
                    for s in states
                ]
                raise ServerError(
                    f"Galera did not reach {size} synced members in {timeout:.0f} s: {seen}"
                )
            time.sleep(0.05)

    def conflicts(self) -> dict[str, int]:
        """Per running member: its certification failures plus brute-force aborts so far."""
        return {
            f"member-{m.index}": sum(int(m.status().get(c, "0")) for c in CONFLICT_COUNTERS)
            for m in self.members
            if m.running
        }

    def close(self) -> None:
        for member in reversed(self.members):
            member.close()
