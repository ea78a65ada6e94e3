"""Who may act from the dashboard, and the session that proves it.

Actions are off unless an :class:`Access` is configured: a shared *token*, or *users* with
password hashes made by :func:`hash_password` (``hashlib.scrypt`` from the standard
library, with a random salt; verified in constant time). A login gives a session cookie
signed with HMAC-SHA256 that expires after ``session_s`` seconds (HttpOnly,
SameSite=Strict, Secure over HTTPS). Every form that acts carries a CSRF token bound to
the session; a request without it, or with another session's, is refused.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from easyjob.clock import Clock
from easyjob.errors import ConfigError

__all__ = ["Access", "Session", "hash_password", "verify_password"]

COOKIE = "easyjob_session"
#: scrypt's cost parameters (n=2**14, r=8, p=1: about 16 MiB and a few tens of ms per try).
_N, _R, _P = 2**14, 8, 1
#: The actor name recorded for a login with the token.
TOKEN_ACTOR = "token"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """A storable hash of *password*: ``scrypt$N$R$P$SALT$HASH`` (base64)."""
    if not password:
        raise ConfigError("a password must not be empty")
    salt = salt if salt is not None else secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=_N, r=_R, p=_P, dklen=32)
    return f"scrypt${_N}${_R}${_P}${_b64(salt)}${_b64(digest)}"


def verify_password(password: str, stored: str) -> bool:
    """Whether *password* matches *stored* (a :func:`hash_password` result)."""
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        found = hashlib.scrypt(
            password.encode(), salt=_unb64(salt), n=int(n), r=int(r), p=int(p), dklen=32
        )
    except (ValueError, MemoryError):
        return False
    return hmac.compare_digest(found, _unb64(digest))


@dataclass(frozen=True)
class Session:
    """A logged-in operator: *actor* (a user name, or ``token``), until *expires* (epoch
    seconds), and the CSRF token its forms carry."""

    actor: str
    expires: float
    csrf: str


@dataclass(frozen=True)
class Access:
    """The credentials that enable the dashboard's actions.

    *token*: a shared secret typed at the login (recorded as actor ``token``); *users*: user
    name to :func:`hash_password` hash. *session_s*: how long a login lasts. *secret* signs
    the session cookies (random per process by default: a restart logs everyone out; give
    the same one to every dashboard process behind one address)."""

    token: str | None = None
    users: Mapping[str, str] = field(default_factory=dict)
    session_s: int = 1800
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    def __post_init__(self) -> None:
        if self.token is not None and len(self.token) < 16:
            raise ConfigError("the dashboard token must have at least 16 characters")
        if self.token is None and not self.users:
            raise ConfigError("dashboard actions need a token or at least one user")
        if self.session_s < 60:
            raise ConfigError(f"session_s must be at least 60 seconds, got {self.session_s!r}")
        for name, stored in self.users.items():
            if not name or name == TOKEN_ACTOR or not stored.startswith("scrypt$"):
                raise ConfigError(
                    f"bad dashboard user {name!r}: a name other than {TOKEN_ACTOR!r} and a hash "
                    "from easyjob.web.hash_password (scrypt$...)"
                )

    @classmethod
    def from_files(
        cls,
        *,
        token_file: str | None = None,
        users_file: str | None = None,
        session_s: int = 1800,
        secret: str | None = None,
    ) -> Access | None:
        """The access the files give, None when neither is given (actions stay off).
        *token_file* holds the token; *users_file* lines ``name:hash`` (``#`` comments)."""
        if token_file is None and users_file is None:
            return None
        token = _read(token_file).strip() if token_file else None
        users: dict[str, str] = {}
        for number, line in enumerate(_read(users_file).splitlines() if users_file else [], 1):
            if line.strip() and not line.lstrip().startswith("#"):
                name, sep, stored = line.strip().partition(":")
                if not sep:
                    raise ConfigError(f"{users_file}:{number}: expected name:hash")
                users[name] = stored
        key = secret.encode() if secret else secrets.token_bytes(32)
        return cls(token=token or None, users=users, session_s=session_s, secret=key)

    def login(self, user: str, password: str) -> str | None:
        """The actor *user* and *password* prove, or None. The token is given with an empty
        *user* (or ``token``)."""
        if user in ("", TOKEN_ACTOR):
            if self.token is None:
                return None
            same = hmac.compare_digest(password.encode(), self.token.encode())
            return TOKEN_ACTOR if same else None
        stored = self.users.get(user)
        if stored is None:
            verify_password(password, _dummy_hash())  # one scrypt either way: no user oracle
            return None
        return user if verify_password(password, stored) else None

    def issue(self, actor: str, clock: Clock) -> str:
        """A signed session cookie value for *actor*, valid for ``session_s``."""
        body = json.dumps(
            {
                "a": actor,
                "e": clock.now().timestamp() + self.session_s,
                "n": _b64(secrets.token_bytes(12)),
            }
        ).encode()
        return f"{_b64(body)}.{self._sign(body)}"

    def session(self, cookie: str | None, clock: Clock) -> Session | None:
        """The session of a cookie value, None unless signed by this access and not expired."""
        if not cookie or "." not in cookie:
            return None
        encoded, signature = cookie.rsplit(".", 1)
        try:
            body = _unb64(encoded)
            if not hmac.compare_digest(signature, self._sign(body)):
                return None
            data = json.loads(body)
            actor, expires, nonce = str(data["a"]), float(data["e"]), str(data["n"])
        except (ValueError, KeyError, TypeError):
            return None
        if expires <= clock.now().timestamp():
            return None
        return Session(actor, expires, self._sign(f"csrf:{nonce}".encode()))

    def _sign(self, data: bytes) -> str:
        return _b64(hmac.new(self.secret, data, hashlib.sha256).digest())


@functools.cache
def _dummy_hash() -> str:
    return hash_password(secrets.token_hex(16))


def _read(path: str | None) -> str:
    assert path is not None
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read {path!r}: {err.strerror}") from err


def main() -> None:
    """``python -m easyjob.web.auth [NAME]``: read a password (twice) and print the line
    for a dashboard users file (``NAME:HASH``, or just the hash)."""
    import getpass
    import sys

    name = sys.argv[1] if len(sys.argv) > 1 else None
    password = getpass.getpass("password: ")
    if password != getpass.getpass("again: "):
        sys.exit("easyjob: the passwords differ")
    stored = hash_password(password)
    print(f"{name}:{stored}" if name else stored)


if __name__ == "__main__":
    main()
