"""Who may use the dashboard, and the rules that keep other sites from using it (B-340..B-344).

- operator accounts of an `--auth-file` (lines `name:scrypt$N$r$p$salt$hash`, hashed with
  hashlib.scrypt) or, with ACL on the brokers, the operator's own access key and secret;
- sessions kept in memory for signed-in operators only: the cookie holds a random token only,
  the store keys it by its SHA-256; an idle session expires; an address keeps at most
  MAX_SESSIONS_PER_ADDRESS (its own least recently used goes first, B-512);
- a browser that has not signed in has nothing stored: its cookie holds `anon.<issued>.<nonce>`
  and its CSRF token is an HMAC of that cookie under the process's own key (a signed
  double-submit), valid `idle_seconds` from issue (B-512);
- a per-session CSRF token and a same-origin Origin (or Referer) on every POST;
- the headers every answer carries (CSP without inline script, no framing, no sniffing).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from es_broker.acl.signing import Credentials

#: scrypt's cost: 16 MiB of memory and well under a second per check
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
#: at most this many signed-in sessions are kept; the least recently used goes first
MAX_SESSIONS = 10_000
#: at most this many of them per client address; that address's least recently used goes first
MAX_SESSIONS_PER_ADDRESS = 32
ANONYMOUS_PREFIX = "anon."

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"x-content-type-options", b"nosniff"),
    (b"cross-origin-opener-policy", b"same-origin"),
]


# ---------------------------------------------------------------------- operator passwords
def hash_password(password: str) -> str:
    """`scrypt$N$r$p$salt$hash` (base64 without padding) of `password`, with a fresh salt."""
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(
        password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32
    )
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(digest)}"


def verify_password(stored: str, password: str) -> bool:
    """Whether `password` hashes to `stored` (a line's part after the name)."""
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        expected = _unb64(digest)
        got = hashlib.scrypt(
            password.encode(),
            salt=_unb64(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(expected),
            maxmem=256 * 1024 * 1024,
        )
    except ValueError:
        return False
    return hmac.compare_digest(got, expected)


def load_auth_file(path: Path) -> dict[str, str]:
    """Operator name -> stored hash, from lines `name:scrypt$...` (# comments, blank lines skipped)."""
    accounts: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, stored = line.partition(":")
        if not sep or not name or len(stored.split("$")) != 6 or not stored.startswith("scrypt$"):
            # the line itself is not repeated: it may hold a hash
            raise ValueError(
                f"{path}:{number}: not `name:scrypt$...` (make a line with "
                "`es-broker dashboard --hash-password NAME`)"
            )
        accounts[name] = stored
    if not accounts:
        raise ValueError(f"{path}: no operator account in it")
    return accounts


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


# ---------------------------------------------------------------------- sessions
@dataclass(slots=True)
class Session:
    """One browser's session: its CSRF token and, once signed in, who it is.

    `credentials`: with ACL on, the operator's own account (kept here, in memory only);
    `operator`: the name shown (an auth-file account, or the access key).
    """

    key: str  # SHA-256 of the cookie's token
    csrf: str
    last_seen: float
    signed_in: bool = False
    operator: str | None = None
    credentials: Credentials | None = field(default=None, repr=False)
    admin: bool = True  # with ACL: the brokers call the account admin (writes are admin requests)
    address: str = ""  # the client address it was made for
    stored: bool = True  # False: an anonymous session, from its cookie alone (AnonymousTokens)


class SessionStore:
    """Sessions by token, in memory; a session idle longer than `idle_seconds` is gone."""

    def __init__(self, idle_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_seconds = idle_seconds
        self.clock = clock
        self._sessions: dict[str, Session] = {}

    @staticmethod
    def _key(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    def new(self, address: str = "", **who: object) -> tuple[str, Session]:
        """A fresh signed-in session (token, session) of a client at `address`; the token goes
        in the cookie only. Room is made among that address's sessions first (B-512)."""
        self._expire()
        mine = [k for k, s in self._sessions.items() if s.address == address]
        for key in mine[: max(0, len(mine) - MAX_SESSIONS_PER_ADDRESS + 1)]:
            del self._sessions[key]  # the address's least recently used
        while len(self._sessions) >= MAX_SESSIONS:
            del self._sessions[next(iter(self._sessions))]
        token = secrets.token_urlsafe(32)
        session = Session(
            key=self._key(token),
            csrf=secrets.token_urlsafe(32),
            last_seen=self.clock(),
            address=address,
        )
        for name, value in who.items():
            setattr(session, name, value)
        self._sessions[session.key] = session
        return token, session

    def get(self, token: str | None) -> Session | None:
        """The live session of `token` (its idle clock restarts), or None."""
        if not token:
            return None
        key = self._key(token)
        session = self._sessions.get(key)
        if session is None:
            return None
        now = self.clock()
        if now - session.last_seen > self.idle_seconds:
            del self._sessions[key]
            return None
        session.last_seen = now
        self._sessions[key] = self._sessions.pop(key)  # most recently used last
        return session

    def drop(self, session: Session) -> None:
        self._sessions.pop(session.key, None)

    def _expire(self) -> None:
        now = self.clock()
        for key in [k for k, s in self._sessions.items() if now - s.last_seen > self.idle_seconds]:
            del self._sessions[key]

    def __len__(self) -> int:
        return len(self._sessions)


class AnonymousTokens:
    """Sessions of browsers that have not signed in, kept nowhere (B-512).

    The cookie is `anon.<issued>.<nonce>`; the CSRF token is HMAC-SHA256 of the
    cookie under a key made when the process starts, so only a cookie this process
    issued has a token that matches, and no request can fill a store.
    """

    def __init__(self, idle_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_seconds = idle_seconds
        self.clock = clock
        self._key = secrets.token_bytes(32)

    def _session(self, token: str, issued: float, signed_in: bool) -> Session:
        csrf = hmac.new(self._key, token.encode(), hashlib.sha256).hexdigest()
        return Session(key="", csrf=csrf, last_seen=issued, signed_in=signed_in, stored=False)

    def new(self, *, signed_in: bool = False) -> tuple[str, Session]:
        """A fresh anonymous session (token, session); `signed_in`: the dashboard has no sign-in."""
        issued = self.clock()
        token = f"{ANONYMOUS_PREFIX}{issued!r}.{secrets.token_urlsafe(16)}"
        return token, self._session(token, issued, signed_in)

    def get(self, token: str | None, *, signed_in: bool = False) -> Session | None:
        """The anonymous session of a cookie this process issued less than idle_seconds ago."""
        if not token or not token.startswith(ANONYMOUS_PREFIX):
            return None
        issued_text, _, nonce = token[len(ANONYMOUS_PREFIX) :].rpartition(".")
        try:
            issued = float(issued_text)
        except ValueError:
            return None
        if not nonce or not 0 <= self.clock() - issued <= self.idle_seconds:
            return None
        return self._session(token, issued, signed_in)

    def due(self, session: Session) -> bool:
        """Whether an anonymous session is past half its life (its page renews it)."""
        return not session.stored and self.clock() - session.last_seen > self.idle_seconds / 2


def csrf_matches(session: Session, given: str | None) -> bool:
    return bool(given) and hmac.compare_digest(session.csrf.encode(), str(given).encode())


# ---------------------------------------------------------------------- origins and hosts
def origin_of(url: str) -> str | None:
    """`scheme://host[:port]` of a URL (Origin or Referer), lower case; None if it has none."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


def same_origin(own: str, origin: str | None, referer: str | None) -> bool:
    """Whether a POST comes from the dashboard's own pages: Origin, else Referer, must be `own`.

    A request with neither is refused: browsers send Origin on every cross-site POST, and
    scripts can send it.
    """
    if origin is not None:
        return origin.lower() == own.lower()
    if referer:
        return origin_of(referer) == own.lower()
    return False


def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(host_header: str) -> str:
    """The name part of a Host header (`[::1]:8080` -> `::1`, `a:80` -> `a`)."""
    if host_header.startswith("["):
        return host_header[1 : host_header.find("]")] if "]" in host_header else host_header
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header
