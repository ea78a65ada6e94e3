"""A TCP proxy in front of a PostgreSQL or MariaDB server, for network faults a test controls.

One proxy listens on 127.0.0.1 (a free port) and forwards to one server. Point a node's
``--db`` URL at :meth:`Proxy.url` and the node's traffic, and only that node's, goes through
it; the test's own store connects to the server directly. Modes (each call returns once the
proxy's thread has applied it, so a fault is in force when the call returns):

- :meth:`heal`: plain pass-through (the starting mode).
- :meth:`latency`: every chunk the server sends back is held for a random delay in
  ``[low, high]`` seconds, order kept: each round trip gets that much slower.
- :meth:`blackhole`: nothing is forwarded either way and every socket stays open; new
  connections are accepted (the kernel completes the handshake) but not connected upstream.
  A client sees a hang, not an error, as behind a real partition. :meth:`heal` forwards what
  was held, as TCP retransmission would.
- :meth:`refuse`: every open connection is reset (RST) and new ones are reset on accept.
- :meth:`lose_commit_replies`: watch the client's stream for ``COMMIT`` (PostgreSQL: a
  simple-query ``Q`` message, as psycopg 3 sends it; MySQL: ``COM_QUERY`` with sequence id 0,
  as PyMySQL sends it), forward it so the server commits, then drop the server's reply and
  reset the client: the client gets a lost-connection error for a transaction that did
  commit. Either the next *count* commits or every *every*-th, optionally only of
  transactions whose statements matched a regular expression.
"""

from __future__ import annotations

import collections
import contextlib
import random
import re
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.engine import make_url

__all__ = ["Proxy", "ProxyStats"]

_CHUNK = 65536
_PG_STARTUP = 196608
_PG_NEGOTIATE = {80877103, 80877104, 80877102}  # SSLRequest, GSSENCRequest, CancelRequest
_COMMIT = re.compile(rb"^\s*COMMIT\s*;?\s*$", re.IGNORECASE)
_END = re.compile(rb"^\s*(COMMIT|ROLLBACK)\b", re.IGNORECASE)


@dataclass
class ProxyStats:
    """What the proxy saw and did since it started."""

    accepted: int = 0
    reset: int = 0
    commits: int = 0  # COMMIT messages seen (matching the filter, when one is set)
    replies_lost: int = 0
    lost_transactions: list[bytes] = field(default_factory=list)  # statements of each
    seen: list[tuple[str, bytes]] = field(default_factory=list)  # (message kind, SQL text)


class _Watcher:
    """Splits a client's byte stream into protocol messages and spots COMMIT."""

    def __init__(self, protocol: str, seen: list[tuple[str, bytes]]) -> None:
        self.protocol = protocol
        self._seen = seen
        self._buf = b""
        self._startup = protocol == "postgresql"
        self.txn: list[bytes] = []  # statement texts since the last COMMIT/ROLLBACK

    def feed(self, data: bytes) -> list[tuple[bytes, bool]]:
        """Return the complete messages in *data* (and earlier leftovers), each with whether
        it is a COMMIT; an incomplete tail is kept for the next call."""
        self._buf += data
        out: list[tuple[bytes, bool]] = []
        while True:
            size = self._next_size()
            if size is None or len(self._buf) < size:
                return out
            message, self._buf = self._buf[:size], self._buf[size:]
            out.append((message, self._inspect(message)))

    def _next_size(self) -> int | None:
        buf = self._buf
        if self.protocol == "postgresql":
            if self._startup:
                return struct.unpack("!I", buf[:4])[0] if len(buf) >= 4 else None
            return 1 + struct.unpack("!I", buf[1:5])[0] if len(buf) >= 5 else None
        return 4 + int.from_bytes(buf[:3], "little") if len(buf) >= 4 else None

    def _inspect(self, message: bytes) -> bool:
        text = self._text(message)
        if text is None:
            return False
        if _END.match(text):
            is_commit = bool(_COMMIT.match(text))
            if not is_commit:
                self.txn = []
            return is_commit
        self.txn.append(text)
        return False

    def _text(self, message: bytes) -> bytes | None:
        """The SQL text a message carries, if it carries one."""
        if self.protocol == "postgresql":
            if self._startup:
                if struct.unpack("!I", message[4:8])[0] == _PG_STARTUP:
                    self._startup = False
                return None
            kind = message[:1]
            if kind == b"Q":
                return self._saw("Q", message[5:].split(b"\0", 1)[0])
            if kind == b"P":  # Parse: statement name, then the query
                return self._saw("P", message[5:].split(b"\0", 2)[1])
            return None
        if message[3] == 0 and len(message) > 4 and message[4] == 0x03:  # COM_QUERY, seq 0
            return self._saw("COM_QUERY", message[5:])
        return None

    def _saw(self, kind: str, text: bytes) -> bytes:
        if len(self._seen) < 2000:  # the first messages with SQL, for tests to inspect
            self._seen.append((kind, text))
        return text


class _Pair:
    def __init__(self, client: socket.socket) -> None:
        self.client = client
        self.server: socket.socket | None = None
        self.to_server = b""
        self.to_client: collections.deque[tuple[float, bytes]] = collections.deque()
        self.to_client_now = b""
        self.doomed = False  # a COMMIT went up whose reply must be lost
        self.watcher: _Watcher | None = None


class Proxy:
    """A controllable TCP proxy to ``host:port``; *protocol* (``postgresql`` or ``mysql``)
    is needed only for :meth:`lose_commit_replies`. Use as a context manager or call
    :meth:`close`."""

    def __init__(self, host: str, port: int, protocol: str | None = None) -> None:
        if protocol not in (None, "postgresql", "mysql"):
            raise ValueError(f"unknown protocol {protocol!r}: use 'postgresql' or 'mysql'")
        self.upstream = (host, port)
        self.protocol = protocol
        self.stats = ProxyStats()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._lock = threading.Lock()
        self._mode = "pass"
        self._delay = (0.0, 0.0)
        self._lose_left = 0
        self._lose_every = 0
        self._lose_match: re.Pattern[bytes] | None = None
        self._wanted = 0
        self._applied = 0
        self._applied_cond = threading.Condition(self._lock)
        self._pairs: list[_Pair] = []
        self._closing = False
        self._thread = threading.Thread(target=self._loop, name=f"proxy-{self.port}", daemon=True)
        self._thread.start()

    @classmethod
    def for_url(cls, url: str) -> Proxy:
        """A proxy in front of the server *url* names (its protocol from the URL)."""
        parsed = make_url(url)
        backend = parsed.get_backend_name()
        protocol = "postgresql" if backend == "postgresql" else "mysql"
        return cls(parsed.host or "127.0.0.1", parsed.port or 0, protocol)

    def url(self, url: str) -> str:
        """*url* with its host and port replaced by this proxy's."""
        parsed = make_url(url).set(host="127.0.0.1", port=self.port)
        return parsed.render_as_string(hide_password=False)

    # -- control (each returns once the proxy thread has applied it) ----------------------

    def heal(self) -> None:
        """Pass everything through at once (held data is forwarded), no commit rule."""
        self._set(mode="pass", delay=(0.0, 0.0), lose=(0, 0, None))

    def latency(self, low: float, high: float | None = None) -> None:
        """Hold each chunk from the server for a random ``low``..``high`` seconds."""
        self._set(mode="pass", delay=(low, low if high is None else high))

    def blackhole(self) -> None:
        """Forward nothing and keep every socket open (clients hang)."""
        self._set(mode="blackhole")

    def refuse(self) -> None:
        """Reset every open connection and every new one, until :meth:`heal`."""
        self._set(mode="refuse")

    def lose_commit_replies(
        self, *, count: int = 0, every: int = 0, match: str | None = None
    ) -> None:
        """Lose the reply of the next *count* COMMITs, or of every *every*-th, counting only
        transactions with a statement matching *match* (a regular expression) when given."""
        if self.protocol is None:
            raise ValueError("lose_commit_replies needs the proxy's protocol")
        if (count > 0) == (every > 0):
            raise ValueError(f"give exactly one of count or every, got {count=!r} {every=!r}")
        pattern = re.compile(match.encode(), re.IGNORECASE) if match else None
        self._set(mode="pass", lose=(count, every, pattern))

    def close(self) -> None:
        with self._lock:
            self._closing = True
        self._wake_w.send(b"x")
        self._thread.join(10)
        with self._lock:
            pairs = list(self._pairs)  # _drop removes from the list: iterate over a copy
        for pair in pairs:
            self._drop(pair, rst=False)
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def _set(
        self,
        *,
        mode: str,
        delay: tuple[float, float] | None = None,
        lose: tuple[int, int, re.Pattern[bytes] | None] | None = None,
    ) -> None:
        with self._lock:
            self._mode = mode
            if delay is not None:
                self._delay = delay
            if lose is not None:
                self._lose_left, self._lose_every, self._lose_match = lose
            self._wanted += 1
            wanted = self._wanted
        self._wake_w.send(b"x")
        with self._applied_cond:
            if not self._applied_cond.wait_for(lambda: self._applied >= wanted, timeout=10):
                raise RuntimeError("proxy thread did not apply the new mode within 10 s")

    # -- the proxy thread --------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._closing:
                    return
                mode, wanted = self._mode, self._wanted
                pairs = list(self._pairs)
            if mode == "refuse":
                for pair in pairs:
                    self._drop(pair, rst=True)
                pairs = []
            with self._applied_cond:
                self._applied = wanted
                self._applied_cond.notify_all()
            self._step(mode, pairs)

    def _step(self, mode: str, pairs: list[_Pair]) -> None:
        readers: list[socket.socket] = [self._listener, self._wake_r]
        writers: list[socket.socket] = []
        timeout = 0.5
        now = time.monotonic()
        if mode == "pass":
            for pair in pairs:
                if pair.server is None and not self._connect(pair):
                    continue
                assert pair.server is not None
                readers.append(pair.server)
                if not pair.doomed:
                    readers.append(pair.client)
                while pair.to_client and pair.to_client[0][0] <= now:
                    pair.to_client_now += pair.to_client.popleft()[1]
                if pair.to_client:
                    timeout = min(timeout, pair.to_client[0][0] - now)
                if pair.to_server:
                    writers.append(pair.server)
                if pair.to_client_now:
                    writers.append(pair.client)
        try:
            readable, writable, _ = select.select(readers, writers, [], max(0.0, timeout))
        except (OSError, ValueError):  # a socket closed under us: rebuild the lists
            return
        for sock in readable:
            if sock is self._listener:
                self._accept(mode)
            elif sock is self._wake_r:
                self._wake_r.recv(4096)
        by_sock = {p.client: p for p in pairs} | {p.server: p for p in pairs if p.server}
        for sock in writable:
            pair = by_sock[sock]
            self._guard(pair, lambda p=pair, s=sock: self._write(p, s))  # type: ignore[misc]
        for sock in readable:
            if sock in by_sock:
                pair = by_sock[sock]
                self._guard(pair, lambda p=pair, s=sock: self._read(p, s))  # type: ignore[misc]

    def _accept(self, mode: str) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        with self._lock:
            self.stats.accepted += 1
        if mode == "refuse":
            self._reset(client)
            return
        client.setblocking(False)
        pair = _Pair(client)
        if self.protocol is not None:
            pair.watcher = _Watcher(self.protocol, self.stats.seen)
        with self._lock:
            self._pairs.append(pair)

    def _connect(self, pair: _Pair) -> bool:
        try:
            server = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            self._drop(pair, rst=True)
            return False
        server.setblocking(False)
        pair.server = server
        return True

    def _guard(self, pair: _Pair, action: Callable[[], None]) -> None:
        try:
            action()
        except OSError:
            self._drop(pair, rst=True)

    def _read(self, pair: _Pair, sock: socket.socket) -> None:
        if pair not in self._pairs:
            return
        data = sock.recv(_CHUNK)
        if not data:
            self._drop(pair, rst=False)
            return
        if sock is pair.client:
            self._from_client(pair, data)
            return
        if pair.doomed:  # the reply to a COMMIT whose reply is lost: drop it and the client
            with self._lock:
                self.stats.replies_lost += 1
            self._drop(pair, rst=True)
            return
        low, high = self._delay
        if high > 0:
            last = pair.to_client[-1][0] if pair.to_client else 0.0
            release = max(last, time.monotonic() + random.uniform(low, high))
            pair.to_client.append((release, data))
        else:
            pair.to_client_now += data

    def _from_client(self, pair: _Pair, data: bytes) -> None:
        if pair.watcher is None:
            pair.to_server += data
            return
        for message, is_commit in pair.watcher.feed(data):
            pair.to_server += message
            if is_commit and self._lose_this(pair.watcher.txn):
                pair.doomed = True
                return  # nothing after the COMMIT: the client waits for its reply
            if is_commit:
                pair.watcher.txn = []

    def _lose_this(self, txn: list[bytes]) -> bool:
        with self._lock:
            if self._lose_match is not None and not any(self._lose_match.search(t) for t in txn):
                return False
            self.stats.commits += 1
            lose = False
            if self._lose_left > 0:
                self._lose_left -= 1
                lose = True
            elif self._lose_every > 0:
                lose = self.stats.commits % self._lose_every == 0
            if lose:
                self.stats.lost_transactions.append(b"; ".join(txn))
            return lose

    def _write(self, pair: _Pair, sock: socket.socket) -> None:
        if sock is pair.server:
            sent = sock.send(pair.to_server)
            pair.to_server = pair.to_server[sent:]
        else:
            sent = sock.send(pair.to_client_now)
            pair.to_client_now = pair.to_client_now[sent:]

    def _drop(self, pair: _Pair, *, rst: bool) -> None:
        with self._lock:
            if pair in self._pairs:
                self._pairs.remove(pair)
            if rst:
                self.stats.reset += 1
        for sock in (pair.client, pair.server):
            if sock is not None:
                if rst:
                    self._reset(sock)
                else:
                    sock.close()

    @staticmethod
    def _reset(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
