"""Real PostgreSQL and MariaDB servers for tests, each on a free loopback port, and PgBouncer
in front of PostgreSQL.

Every server keeps all of its files under its own temporary directory, runs in its own session
(so signals aimed at a test's process group do not reach it) and, when the tests run as root,
as the unprivileged OS user ``easyjob-db``. Fault helpers (kill, pause, restart, read-only,
terminate connections) let tests put the database through what production sees.

Admin statements use psycopg 3 (PostgreSQL) and PyMySQL (MariaDB); the app account is
``easyjob``/``easyjob`` and never a superuser.
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import psycopg
import pymysql
from sqlalchemy.engine import make_url

OS_USER = "easyjob-db"
APP_USER = "easyjob"
APP_PASSWORD = "easyjob"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
DIR_PREFIX = "easyjob-rig-"

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_PORT_IN_USE = "Address already in use"


class ServerError(RuntimeError):
    """A database server could not be prepared, started or controlled."""


class _PortInUse(ServerError):
    pass


def free_port() -> int:
    """Return a loopback TCP port that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _check_name(name: str) -> str:
    if not _NAME_RE.fullmatch(name):
        raise ValueError(f"invalid database name {name!r}: use letters, digits and _ only")
    return name


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _proc_state(pid) not in (None, "Z")


def _proc_state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (PostgreSQL backends call setsid, so no killpg)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _signal(pids: Sequence[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _wait_gone(pids: Sequence[int], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while any(_pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)


def _os_ids() -> tuple[int, int] | None:
    """The (uid, gid) to run servers as: ``easyjob-db`` when root (created on demand)."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(OS_USER)
    except KeyError:
        done = subprocess.run(
            [
                *("useradd", "--system", "--no-create-home", "--user-group"),
                *("--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", OS_USER),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        try:
            entry = pwd.getpwnam(OS_USER)  # a concurrent run may have created it
        except KeyError:
            raise ServerError(f"cannot create OS user {OS_USER}: {done.stderr.strip()}") from None
    return entry.pw_uid, entry.pw_gid


def reap_orphans() -> None:
    """Kill servers and remove directories left by test runs that died (e.g. SIGKILLed)."""
    for base in glob.glob(os.path.join(tempfile.gettempdir(), DIR_PREFIX + "*")):
        try:
            owner = int(Path(base, "owner.pid").read_text())
        except (OSError, ValueError):
            continue
        if _pid_alive(owner):
            continue
        with contextlib.suppress(OSError, ValueError):
            pid = int(Path(base, "server.pid").read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if base.encode() in cmdline:
                pids = [pid, *_children(pid)]
                _signal(pids, signal.SIGKILL)
                _wait_gone(pids)
        shutil.rmtree(base, ignore_errors=True)


_LIVE: set[DatabaseServer] = set()
_reaped = False


@atexit.register
def _kill_leftovers() -> None:
    """Safety net: whatever a fixture failed to stop dies with the test process."""
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.kill()
        shutil.rmtree(server.base_dir, ignore_errors=True)
    _LIVE.clear()


class DatabaseServer(abc.ABC):
    """A throwaway database server process with all its data in a temporary directory.

    ``external_url`` wraps an already running server instead (admin URL): database helpers
    work, process control (stop, kill, restart, pause) raises :class:`ServerError`.
    """

    backend: ClassVar[str]
    _stop_signal: ClassVar[signal.Signals]

    def __init__(self, *, timezone: str = "UTC", external_url: str | None = None) -> None:
        self._timezone = timezone
        self._external = make_url(external_url) if external_url else None
        self._port: int | None = self._external.port if self._external else None
        self._proc: subprocess.Popen[bytes] | None = None
        self._initialized = False
        self._paused = False
        self._read_only = False
        self._ids: tuple[int, int] | None = None
        self._base = Path()
        if self._external is None:
            global _reaped
            if not _reaped:
                _reaped = True
                reap_orphans()
            self._ids = _os_ids()
            self._base = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{self.backend}-"))
            (self._base / "owner.pid").write_text(str(os.getpid()))
            self._chown(self._base)
            _LIVE.add(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} port={self._port} dir={self._base}>"

    # -- public API ------------------------------------------------------------------------

    @classmethod
    @abc.abstractmethod
    def missing(cls) -> str | None:
        """Why this server cannot be started here, or None if it can."""

    @property
    def port(self) -> int:
        if self._port is None:
            raise ServerError(f"{self.backend} server was never started")
        return self._port

    @property
    def base_dir(self) -> Path:
        return self._base

    @property
    def managed(self) -> bool:
        """True when this object owns the server process (not an external server)."""
        return self._external is None

    @property
    def running(self) -> bool:
        if self._external is not None:
            return True
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int:
        self._require_managed("pid")
        if self._proc is None:
            raise ServerError(f"{self.backend} server is not running")
        return self._proc.pid

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    @abc.abstractmethod
    def admin_url(self) -> str:
        """SQLAlchemy URL of a superuser account (only for rig code, never for the app)."""

    def start(self) -> None:
        """Start the server (first time: initialize data, pick a free port); wait until ready."""
        if self.running:
            return
        if not self._initialized:
            self._init_data()
            self._initialized = True
        fixed = self._port is not None
        for attempt in range(5):
            port = self._port if self._port is not None else free_port()
            try:
                self._launch(port)
            except _PortInUse:
                if fixed or attempt == 4:
                    raise
                continue
            self._port = port
            break
        if self._read_only:
            self.set_read_only(True)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Clean shutdown by pid; SIGKILL if it has not stopped within ``timeout``."""
        self._require_managed("stop")
        if self._proc is None:
            return
        if self._paused:
            self.resume()
        _signal([self._proc.pid], self._stop_signal)
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return
        _wait_gone(_children(self._proc.pid))
        self._proc = None

    def kill(self) -> None:
        """SIGKILL the server and all its processes: a database crash (the OS cache survives)."""
        self._require_managed("kill")
        if self._proc is None:
            return
        pids = [self._proc.pid, *_children(self._proc.pid)]
        _signal(pids, signal.SIGKILL)
        self._proc.wait()
        _wait_gone(pids)
        self._proc = None
        self._paused = False

    def restart(self) -> None:
        """Stop and start again on the same port with the same data."""
        self.stop()
        self.start()

    def pause(self) -> None:
        """SIGSTOP every server process: the database stalls, connections stay open."""
        pid = self.pid
        _signal([pid], signal.SIGSTOP)  # first, so it forks no new backend meanwhile
        _signal(_children(pid), signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """SIGCONT what :meth:`pause` stopped."""
        pid = self.pid
        _signal(_children(pid), signal.SIGCONT)
        _signal([pid], signal.SIGCONT)
        self._paused = False

    def ensure_healthy(self) -> None:
        """Undo faults a test may have left: resume, start if down, leave read-only mode."""
        if self.managed:
            if self._paused:
                self.resume()
            if not self.running:
                self._proc = None
                self.start()
        if self._read_only:
            self.set_read_only(False)

    def close(self) -> None:
        """Stop the server and remove its directory."""
        if not self.managed:
            return
        try:
            self.stop()
        finally:
            shutil.rmtree(self._base, ignore_errors=True)
            _LIVE.discard(self)

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self._log.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    @abc.abstractmethod
    def create_database(self, name: str) -> str:
        """Create an empty database the app user owns; return its SQLAlchemy URL."""

    @abc.abstractmethod
    def drop_database(self, name: str) -> None:
        """Drop a database (if it exists), terminating its connections first."""

    @abc.abstractmethod
    def terminate_connections(self, database: str | None = None) -> int:
        """Kill the app user's connections (to ``database`` only, if given); return count."""

    @abc.abstractmethod
    def set_read_only(self, read_only: bool) -> None:
        """Make the server refuse (or accept again) writes by the app user."""

    # -- subclass hooks --------------------------------------------------------------------

    @abc.abstractmethod
    def _init_data(self) -> None: ...

    @abc.abstractmethod
    def _argv(self, port: int) -> list[str]: ...

    @abc.abstractmethod
    def _ping(self, port: int) -> bool: ...

    # -- helpers ---------------------------------------------------------------------------

    @property
    def _log(self) -> Path:
        return self._base / "server.log"

    def _require_managed(self, what: str) -> None:
        if self._external is not None:
            raise ServerError(f"cannot {what} an external {self.backend} server")

    def _chown(self, path: Path) -> None:
        if self._ids is not None:
            os.chown(path, *self._ids)

    def _mkdir(self, name: str) -> Path:
        path = self._base / name
        path.mkdir(exist_ok=True)
        self._chown(path)
        return path

    def _env(self) -> dict[str, str]:
        drop = ("PG", "MYSQL", "MARIADB", "FAKETIME", "LD_PRELOAD")
        env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
        env.update(HOME=str(self._base), TZ=self._timezone, LC_ALL="C", LANG="C")
        return env

    def _as_server_user(self) -> dict[str, Any]:
        if self._ids is None:
            return {}
        return {"user": self._ids[0], "group": self._ids[1], "extra_groups": []}

    def _run(self, argv: list[str]) -> None:
        """Run a setup command as the server's OS user; fail with its output."""
        done = subprocess.run(
            argv,
            cwd=self._base,
            env=self._env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT * 2,
            check=False,
            **self._as_server_user(),
        )
        if done.returncode != 0:
            output = (done.stdout + done.stderr)[-3000:]
            raise ServerError(
                f"{argv[0]} failed ({done.returncode}):\n{output}\n"
                f"log {self._log}:\n{self.log_tail()}"
            )

    def _launch(self, port: int) -> None:
        self._log.touch()
        self._chown(self._log)
        offset = self._log.stat().st_size
        with self._log.open("ab") as out:
            self._proc = subprocess.Popen(
                self._argv(port),
                cwd=self._base,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **self._as_server_user(),
            )
        (self._base / "server.pid").write_text(str(self._proc.pid))
        started = time.monotonic()
        while not self._ping(port):
            if self._proc.poll() is not None:
                self._proc = None
                with self._log.open("rb") as f:
                    f.seek(offset)
                    if _PORT_IN_USE in f.read().decode(errors="replace"):
                        raise _PortInUse(f"port {port} is in use")
                raise ServerError(
                    f"{self.backend} server exited during startup on port {port}; "
                    f"log {self._log}:\n{self.log_tail()}"
                )
            if time.monotonic() - started > START_TIMEOUT:
                self.kill()
                raise ServerError(
                    f"{self.backend} server did not answer within {START_TIMEOUT:.0f} s on "
                    f"port {port}; log {self._log}:\n{self.log_tail()}"
                )
            time.sleep(0.05)


def _postgres_bindir() -> Path | None:
    """Directory with ``postgres`` and ``initdb``: from PATH, else the newest Debian one."""
    candidates = []
    on_path = shutil.which("postgres")
    if on_path:
        candidates.append(Path(os.path.realpath(on_path)).parent)
    versions = glob.glob("/usr/lib/postgresql/*/bin")
    versions.sort(key=lambda p: [int(x) for x in re.findall(r"\d+", p)], reverse=True)
    candidates += [Path(p) for p in versions]
    for bindir in candidates:
        if all(os.access(bindir / exe, os.X_OK) for exe in ("postgres", "initdb")):
            return bindir
    return None


class PostgresServer(DatabaseServer):
    """PostgreSQL with trust auth on 127.0.0.1, tuned for speed (fsync off), 300 connections."""

    backend = "postgresql"
    _stop_signal = signal.SIGINT  # "fast" shutdown; SIGTERM would wait for clients

    @classmethod
    def missing(cls) -> str | None:
        if _postgres_bindir() is None:
            return "PostgreSQL binaries (postgres, initdb) not on PATH or in /usr/lib/postgresql"
        return None

    @property
    def admin_url(self) -> str:
        if self._external is not None:
            return self._external.render_as_string(hide_password=False)
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def app_url(self, database: str) -> str:
        host = self._external.host if self._external else "127.0.0.1"
        return f"postgresql+psycopg://{APP_USER}:{APP_PASSWORD}@{host}:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        _check_name(name)
        with self._connect() as conn:
            conn.execute(
                f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{APP_USER}') "
                f"THEN CREATE ROLE {APP_USER} LOGIN PASSWORD '{APP_PASSWORD}'; END IF; END $$"
            )
            conn.execute(f'CREATE DATABASE "{name}" OWNER {APP_USER}')
        return self.app_url(name)

    def drop_database(self, name: str) -> None:
        _check_name(name)
        with self._connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def terminate_connections(self, database: str | None = None) -> int:
        # pg_terminate_backend only signals: with a timeout it waits until each session has
        # really ended, so the caller's next statement cannot still reach a live one
        sql = (
            "SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity "
            "WHERE usename = %s AND pid <> pg_backend_pid()"
        )
        params = [APP_USER]
        if database is not None:
            sql += " AND datname = %s"
            params.append(database)
        with self._connect() as conn:
            row = conn.execute(sql, params).fetchone()
        return int(row[0]) if row else 0

    def set_read_only(self, read_only: bool) -> None:
        with self._connect() as conn:
            if read_only:
                conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            else:
                conn.execute("ALTER SYSTEM RESET default_transaction_read_only")
            conn.execute("SELECT pg_reload_conf()")
        self._read_only = read_only
        # The reload is asynchronous: wait until a new session sees it, then make existing
        # sessions reconnect so they see it too.
        want = "on" if read_only else "off"
        deadline = time.monotonic() + 10
        while True:
            with self._connect(override_read_only=False) as conn:
                row = conn.execute("SHOW default_transaction_read_only").fetchone()
            if row and row[0] == want:
                break
            if time.monotonic() > deadline:
                raise ServerError(f"default_transaction_read_only did not become {want}")
            time.sleep(0.02)
        with self._connect() as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
            )

    def _connect(
        self, port: int | None = None, *, override_read_only: bool = True, timeout: int = 10
    ) -> psycopg.Connection[tuple[Any, ...]]:
        url = make_url(self.admin_url if port is None else self._admin_url_for(port))
        return psycopg.connect(
            host=url.host,
            port=url.port,
            user=url.username,
            password=url.password,
            dbname=url.database or "postgres",
            autocommit=True,
            connect_timeout=timeout,
            options="-c default_transaction_read_only=off" if override_read_only else None,
        )

    def _admin_url_for(self, port: int) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"

    def _init_data(self) -> None:
        bindir = _postgres_bindir()
        if bindir is None:
            raise ServerError(self.missing() or "no PostgreSQL")
        self._bindir = bindir
        self._mkdir("data")
        self._mkdir("sock")
        self._run(
            [
                *(str(bindir / "initdb"), "-D", str(self._base / "data"), "-U", "postgres"),
                *("--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"),
            ]
        )

    def _argv(self, port: int) -> list[str]:
        settings = {
            "listen_addresses": "127.0.0.1",
            "max_connections": "300",
            # Speed, not durability: a killed server still keeps every acknowledged commit
            # (the OS page cache survives), so synchronous_commit stays on: with it off,
            # kill() would lose the last ~0.6 s of commits, which a real crash of only the
            # database process does not.
            "fsync": "off",
            "full_page_writes": "off",
        }
        argv = [str(self._bindir / "postgres"), "-D", str(self._base / "data"), "-p", str(port)]
        argv += ["-k", str(self._base / "sock")]
        for key, value in settings.items():
            argv += ["-c", f"{key}={value}"]
        return argv

    def _ping(self, port: int) -> bool:
        try:
            with self._connect(port, timeout=2) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        return True


class PostgresStandby(PostgresServer):
    """A streaming hot standby of *primary* (``pg_basebackup -R``), on its own port, that
    :meth:`promote` makes a primary. Databases are created on the primary (they replicate)."""

    def __init__(self, primary: PostgresServer) -> None:
        self.primary = primary
        super().__init__()

    def create_database(self, name: str) -> str:
        raise ServerError("a standby is read-only: create databases on its primary")

    def synchronous(self, timeout: float = 30.0) -> None:
        """Make the primary wait for this standby at every commit (``synchronous_standby_names
        = '*'``): a commit the primary acknowledged survives its crash and a promotion."""
        with self.primary._connect() as conn:
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            conn.execute("SELECT pg_reload_conf()")
        deadline = time.monotonic() + timeout
        while True:
            with self.primary._connect() as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'"
                ).fetchone()
            if row and row[0] >= 1:
                return
            if time.monotonic() > deadline:
                raise ServerError(f"the standby on port {self.port} did not become synchronous")
            time.sleep(0.05)

    def promote(self) -> None:
        """Make this standby a primary (``pg_ctl promote``, waiting until it accepts writes)."""
        self._run([str(self._bindir / "pg_ctl"), "-D", str(self._base / "data"), "-w", "promote"])

    def _init_data(self) -> None:
        bindir = _postgres_bindir()
        if bindir is None:
            raise ServerError(self.missing() or "no PostgreSQL")
        self._bindir = bindir
        self._mkdir("sock")
        backup = [str(bindir / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(self.primary.port)]
        backup += ["-U", "postgres", "-D", str(self._base / "data"), "-R", "-X", "stream"]
        self._run([*backup, "-c", "fast", "--no-sync"])


def _mariadb_binaries() -> tuple[str, str] | None:
    """(mariadbd, mariadb-install-db), also looking in sbin dirs that may not be on PATH."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])
    server = shutil.which("mariadbd", path=path) or shutil.which("mysqld", path=path)
    install = shutil.which("mariadb-install-db", path=path) or shutil.which(
        "mysql_install_db", path=path
    )
    return (server, install) if server and install else None


class MariaDBServer(DatabaseServer):
    """MariaDB on 127.0.0.1 with READ-COMMITTED, utf8mb4, 500 connections, speed settings.

    Admin is ``root``/``root`` over TCP; the app user ``easyjob`` gets ALL on each database
    created for it and nothing global (no SUPER), so ``read_only`` really stops it.
    """

    backend = "mariadb"
    _stop_signal = signal.SIGTERM

    @classmethod
    def missing(cls) -> str | None:
        if _mariadb_binaries() is None:
            return "MariaDB (mariadbd, mariadb-install-db) not found: run `make deps`"
        return None

    @property
    def admin_url(self) -> str:
        if self._external is not None:
            return self._external.render_as_string(hide_password=False)
        return self._admin_url_for(self.port)

    def app_url(self, database: str) -> str:
        host = self._external.host if self._external else "127.0.0.1"
        return (
            f"mysql+pymysql://{APP_USER}:{APP_PASSWORD}@{host}:{self.port}/{database}"
            "?charset=utf8mb4"
        )

    def create_database(self, name: str) -> str:
        _check_name(name)
        with self._cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
            cur.execute(
                f"CREATE USER IF NOT EXISTS '{APP_USER}'@'%' IDENTIFIED BY '{APP_PASSWORD}'"
            )
            cur.execute(f"GRANT ALL PRIVILEGES ON `{name}`.* TO '{APP_USER}'@'%'")
        return self.app_url(name)

    def drop_database(self, name: str) -> None:
        _check_name(name)
        self.terminate_connections(name)
        with self._cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")

    def terminate_connections(self, database: str | None = None) -> int:
        sql = "SELECT id FROM information_schema.processlist WHERE user = %s"
        params = [APP_USER]
        if database is not None:
            sql += " AND db = %s"
            params.append(database)
        killed = 0
        with self._cursor() as cur:
            cur.execute(sql, params)
            for (thread_id,) in cur.fetchall():
                try:
                    cur.execute(f"KILL CONNECTION {int(thread_id)}")
                    killed += 1
                except pymysql.err.OperationalError as exc:
                    if exc.args[0] != 1094:  # unknown thread: it went away by itself
                        raise
            # KILL is asynchronous: wait until those sessions are really gone.
            deadline = time.monotonic() + 10
            while killed and time.monotonic() < deadline:
                cur.execute(sql.replace("SELECT id", "SELECT count(*)"), params)
                if cur.fetchone()[0] == 0:
                    break
                time.sleep(0.02)
        return killed

    def set_read_only(self, read_only: bool) -> None:
        with self._cursor() as cur:
            cur.execute(f"SET GLOBAL read_only = {int(read_only)}")
        self._read_only = read_only  # re-applied after a restart, like PostgreSQL's

    @contextlib.contextmanager
    def _cursor(self, port: int | None = None, timeout: int = 10) -> Iterator[Any]:
        url = make_url(self.admin_url if port is None else self._admin_url_for(port))
        conn = pymysql.connect(
            host=url.host,
            port=url.port or 3306,
            user=url.username,
            password=url.password or "",
            connect_timeout=timeout,
            autocommit=True,
            charset="utf8mb4",
        )
        try:
            with conn.cursor() as cur:
                cur.execute("SET SESSION lock_wait_timeout = 30")
                yield cur
        finally:
            conn.close()

    def _admin_url_for(self, port: int) -> str:
        return f"mysql+pymysql://root:root@127.0.0.1:{port}/?charset=utf8mb4"

    def _options(self) -> dict[str, object]:
        """The ``[mysqld]`` section of this server's option file (None: a bare flag)."""
        return {
            "datadir": self._mkdir("data"),
            "tmpdir": self._mkdir("tmp"),
            "socket": self._base / "mariadb.sock",
            "pid-file": self._base / "mariadb.pid",
            "log-error": self._log,
            "bind-address": "127.0.0.1",
            "skip-name-resolve": None,
            "transaction_isolation": "READ-COMMITTED",
            "character-set-server": "utf8mb4",
            "max_connections": 500,
            "innodb_flush_log_at_trx_commit": 2,
            "innodb_doublewrite": 0,
            "innodb_buffer_pool_size": "64M",
            "innodb_log_file_size": "32M",
        }

    def _init_data(self) -> None:
        binaries = _mariadb_binaries()
        if binaries is None:
            raise ServerError(self.missing() or "no MariaDB")
        self._mariadbd, install_db = binaries
        options = self._options()
        lines = ["[mysqld]"] + [k if v is None else f"{k}={v}" for k, v in options.items()]
        self._cnf = self._base / "my.cnf"
        self._cnf.write_text("\n".join(lines) + "\n")
        # Run by mariadbd at every start (extra-file of install-db runs without grant tables).
        self._init_sql = self._base / "init.sql"
        self._init_sql.write_text(
            "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY 'root';\n"
            "GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;\n"
            f"CREATE USER IF NOT EXISTS '{APP_USER}'@'%' IDENTIFIED BY '{APP_PASSWORD}';\n"
        )
        self._log.touch()
        self._chown(self._log)
        if self._seeds_data():
            self._run([install_db, f"--defaults-file={self._cnf}", "--skip-test-db"])

    def _seeds_data(self) -> bool:
        """True when this server makes its own system tables (a Galera joiner copies them)."""
        return True

    def _argv(self, port: int) -> list[str]:
        cnf, init = f"--defaults-file={self._cnf}", f"--init-file={self._init_sql}"
        return [self._mariadbd, cnf, init, f"--port={port}"]

    def _ping(self, port: int) -> bool:
        try:
            with self._cursor(port, timeout=2) as cur:
                cur.execute("SELECT 1")
        except pymysql.err.MySQLError:
            return False
        return True


def _pgbouncer_binary() -> str | None:
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])
    return shutil.which("pgbouncer", path=path)


class PgBouncerServer(DatabaseServer):
    """PgBouncer in front of *postgres*, in transaction pooling mode unless *pool_mode* says.

    Everything else is at PgBouncer's defaults: what it refuses (a startup ``options``
    parameter, prepared statements carried from one transaction to the next), easyjob must
    not need. Every database of the backend is served (a ``*`` entry); authentication is
    ``trust``. Databases are created, dropped, made read-only and have their connections
    terminated on the backend; stop, start, kill and pause act on PgBouncer itself.
    """

    backend = "pgbouncer"
    _stop_signal = signal.SIGTERM  # immediate shutdown; SIGINT would wait for clients

    def __init__(self, postgres: PostgresServer, pool_mode: str = "transaction") -> None:
        self.postgres = postgres
        self.pool_mode = pool_mode
        super().__init__()

    @classmethod
    def missing(cls) -> str | None:
        if _pgbouncer_binary() is None:
            return "PgBouncer (pgbouncer) not found: run `make deps`"
        return None

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def app_url(self, database: str) -> str:
        return f"postgresql+psycopg://{APP_USER}:{APP_PASSWORD}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        self.postgres.create_database(name)
        return self.app_url(name)

    def drop_database(self, name: str) -> None:
        self.postgres.drop_database(name)

    def terminate_connections(self, database: str | None = None) -> int:
        return self.postgres.terminate_connections(database)

    def set_read_only(self, read_only: bool) -> None:
        self.postgres.set_read_only(read_only)

    def ensure_healthy(self) -> None:
        self.postgres.ensure_healthy()
        super().ensure_healthy()

    def _init_data(self) -> None:
        binary = _pgbouncer_binary()
        if binary is None:
            raise ServerError(self.missing() or "no PgBouncer")
        self._binary = binary
        users = self._base / "users.txt"
        users.write_text(f'"{APP_USER}" ""\n"postgres" ""\n')
        self._chown(users)

    def _argv(self, port: int) -> list[str]:
        ini = self._base / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"* = host=127.0.0.1 port={self.postgres.port}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self._base / 'users.txt'}\n"
            f"pool_mode = {self.pool_mode}\n"
        )
        self._chown(ini)
        return [self._binary, str(ini)]

    def _ping(self, port: int) -> bool:
        try:
            with psycopg.connect(
                host="127.0.0.1",
                port=port,
                user="postgres",
                dbname="postgres",
                connect_timeout=2,
                autocommit=True,
                prepare_threshold=None,
            ) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        return True


SERVER_CLASSES: dict[str, type[DatabaseServer]] = {
    "postgresql": PostgresServer,
    "mariadb": MariaDBServer,
}


def available_binaries() -> dict[str, str | None]:
    """Per backend: None if its server can be started here, else the reason it cannot."""
    return {name: cls.missing() for name, cls in SERVER_CLASSES.items()}
