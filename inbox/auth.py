"""Who is looking at the inbox: authentication modes, sessions and CSRF tokens.

Two modes map a person to a *principal* (the name a task's policy lists as an approver):

``token``
    A file maps secret tokens to principals (JSON ``{"<token>": "<principal>"}``; a key may also be
    ``"sha256:<hex>"``, the digest of the token, so the file need not hold the token itself). The
    person types the token on the login page once and gets a session cookie (``HttpOnly``,
    ``SameSite=Strict``). Serve it over TLS (behind a proxy) anywhere but on loopback.

``header``
    A trusted reverse proxy (oauth2-proxy, an SSO gateway, ...) authenticates people and names the
    principal in a request header (default ``X-Forwarded-User``). The inbox believes that header
    blindly, so this mode is only safe when nothing but the proxy can reach the inbox's port: bind
    it to loopback or a private interface the proxy alone reaches, and make the proxy strip the
    header from incoming requests. (Loopback alone is not enough on a machine where people browse:
    a page that rebinds its DNS name to 127.0.0.1 could send the header itself.)

Every form carries a CSRF token that its POST must repeat, bound to a cookie a page on another
site cannot send (``SameSite=Strict``), and a POST a browser marks as cross-site
(``Sec-Fetch-Site``) is refused outright:

- signing in (token mode): ``GET /login`` sets a pre-login cookie; the form's token is an HMAC of it
  under a per-process secret. So another site cannot sign a browser in as the attacker's principal
  (login CSRF): its POST arrives without that cookie. Nothing is stored for it.
- token mode, signed in: a session (in memory, so a restart logs everyone out) with a random CSRF
  token; the table is bounded (``MAX_SESSIONS``, the least recently used goes first) and idle
  sessions expire.
- header mode: no session table at all, since the proxy names the principal on every request. The
  cookie holds a random id and the CSRF token is an HMAC of the principal and that id, so a
  cookie-less request (a monitor, a script) leaves no server state behind.

Guessing tokens is slowed by ``LoginThrottle``: after ``MAX_FAILED_LOGINS_PER_CLIENT`` wrong tokens
from one address within ``LOGIN_WINDOW_SECONDS``, or ``MAX_FAILED_LOGINS`` from everyone, the login
answers 429 with ``Retry-After`` (a right token too) until the oldest failure leaves the window. The
address is the connection's: behind a proxy every person shares the proxy's, and the limit is then
the proxy's (which should limit on its own). The global limit caps a guesser with many addresses, at
the price that such a guesser can hold sign-ins off for everyone while it keeps failing; sessions
already open are not affected.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

COOKIE = "aw_inbox_session"
LOGIN_COOKIE = "aw_inbox_login"
LOGIN_COOKIE_SECONDS = 3600
SESSION_IDLE_SECONDS = 8 * 3600
MAX_SESSIONS = 10_000
_COOKIE_VALUE = re.compile(r"^[A-Za-z0-9_-]{43}$")  # secrets.token_urlsafe(32)
DEFAULT_PRINCIPAL_HEADER = "X-Forwarded-User"
_PRINCIPAL = re.compile(r"^[^\x00-\x1f\x7f]{1,200}$")
# The shortest token a tokens file may hold (a "sha256:" entry is the digest of one, unchecked).
MIN_TOKEN_LENGTH = 16
# Failed sign-ins allowed within the window, per client address and in all (``LoginThrottle``).
LOGIN_WINDOW_SECONDS = 300
MAX_FAILED_LOGINS_PER_CLIENT = 10
MAX_FAILED_LOGINS = 100
MAX_THROTTLED_CLIENTS = 10_000


class InboxConfigError(ValueError):
    """The inbox cannot start as configured (tokens file, bind address, auth mode); the message says why."""


@dataclass
class Session:
    """One logged-in browser: its principal and the CSRF token its forms carry."""

    session_id: str
    principal: str
    csrf: str
    last_seen: float = field(default_factory=time.monotonic)


def well_formed_cookie(value: str | None) -> bool:
    """Whether ``value`` looks like a cookie value the inbox made (43 URL-safe base64 characters)."""
    return value is not None and _COOKIE_VALUE.match(value) is not None


def valid_principal(value: str | None) -> str | None:
    """``value`` stripped when it can name a principal (non-empty, printable, at most 200 chars)."""
    if value is None:
        return None
    value = value.strip()
    return value if _PRINCIPAL.match(value) else None


def load_tokens(path: Path) -> dict[str, str]:
    """Read a tokens file: a JSON object mapping tokens (or ``sha256:<hex>`` of them) to principals.

    Raises:
        InboxConfigError: the file is missing, not JSON, not an object of strings, or empty.
    """
    try:
        raw = json.loads(path.read_text())
    except OSError as err:
        raise InboxConfigError(f"cannot read the tokens file {path}: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise InboxConfigError(
            f"tokens file {path} is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})"
        ) from None
    if not isinstance(raw, dict) or not raw:
        raise InboxConfigError(
            f'tokens file {path} must be a non-empty JSON object {{"<token>": "<principal>"}}'
        )
    tokens: dict[str, str] = {}
    for token, principal in raw.items():
        if not isinstance(principal, str) or valid_principal(principal) is None:
            raise InboxConfigError(
                f"tokens file {path}: the principal of a token is not a valid name: {principal!r}"
            )
        if token.startswith("sha256:"):
            if not re.fullmatch(r"sha256:[0-9a-f]{64}", token):
                raise InboxConfigError(f"tokens file {path}: a 'sha256:' key must be 64 lowercase hex digits")
        elif len(token) < MIN_TOKEN_LENGTH:
            # A short token can be guessed; never let a typo-sized secret guard approvals.
            raise InboxConfigError(
                f"tokens file {path}: the token for {principal!r} is shorter than "
                f"{MIN_TOKEN_LENGTH} characters"
            )
        tokens[token] = principal.strip()
    return tokens


class Authenticator:
    """Maps requests to principals and keeps the sessions (used on the server's event loop only).

    Args:
        mode: ``"token"`` or ``"header"``.
        tokens: for ``token`` mode, tokens (or ``sha256:<hex>`` digests of them) to principals.
        principal_header: for ``header`` mode, the header the trusted proxy sets.
        max_sessions: token mode keeps at most this many sessions (the least recently used goes).
    """

    def __init__(
        self,
        mode: str,
        tokens: dict[str, str] | None = None,
        principal_header: str = DEFAULT_PRINCIPAL_HEADER,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        if mode not in ("token", "header"):
            raise InboxConfigError(f"unknown auth mode {mode!r}; use 'token' or 'header'")
        if mode == "token" and not tokens:
            raise InboxConfigError("token mode needs a tokens file (--tokens FILE)")
        if mode == "header" and not re.fullmatch(r"[A-Za-z0-9-]{1,100}", principal_header):
            raise InboxConfigError(f"not a header name: {principal_header!r}")
        self.mode = mode
        self.principal_header = principal_header
        self._plain = {t: p for t, p in (tokens or {}).items() if not t.startswith("sha256:")}
        self._hashed = {t: p for t, p in (tokens or {}).items() if t.startswith("sha256:")}
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, Session] = OrderedDict()  # least recently used first
        self._secret = secrets.token_bytes(32)  # for the HMAC-bound CSRF tokens; dies with the process

    @property
    def session_count(self) -> int:
        """How many sessions the server keeps (always 0 in header mode)."""
        return len(self._sessions)

    @property
    def principals(self) -> set[str]:
        """The principals the tokens file names (empty in header mode)."""
        return set(self._plain.values()) | set(self._hashed.values())

    def principal_for_token(self, token: str) -> str | None:
        """The principal ``token`` maps to, or None. Every entry is compared in constant time."""
        found = None
        given = token.encode()
        digest = "sha256:" + hashlib.sha256(given).hexdigest()
        for known, principal in self._plain.items():
            if hmac.compare_digest(known.encode(), given):
                found = principal
        for known, principal in self._hashed.items():
            if hmac.compare_digest(known, digest):
                found = principal
        return found

    def principal_from_header(self, headers: dict[str, str]) -> str | None:
        """In header mode, the principal the proxy named (None when absent or not a valid name)."""
        return valid_principal(headers.get(self.principal_header.lower()))

    def new_session(self, principal: str) -> Session:
        """Start a session for ``principal`` with a fresh CSRF token (token mode; kept in the table)."""
        self._expire()
        while len(self._sessions) >= self.max_sessions:
            self._sessions.popitem(last=False)
        session = Session(secrets.token_urlsafe(32), principal, secrets.token_urlsafe(32))
        self._sessions[session.session_id] = session
        return session

    def header_session(self, principal: str, cookie_id: str | None) -> tuple[Session, bool]:
        """Header mode: the request's session, kept nowhere, and whether its cookie is new.

        The cookie holds a random id; the CSRF token is an HMAC of the principal and that id, so it
        is checked without a table and cannot be reused by another principal or another browser.
        """
        fresh = not well_formed_cookie(cookie_id)
        session_id = secrets.token_urlsafe(32) if fresh else cookie_id
        assert session_id is not None
        return Session(session_id, principal, self._mac("header", principal, session_id)), fresh

    def login_csrf(self, login_cookie: str) -> str:
        """The login form's CSRF token for a browser holding ``login_cookie`` (the pre-login cookie)."""
        return self._mac("login", login_cookie)

    def login_csrf_ok(self, login_cookie: str | None, submitted: str | None) -> bool:
        """Whether a login POST carries the pre-login cookie and the form token made for it."""
        if not well_formed_cookie(login_cookie) or not submitted:
            return False
        assert login_cookie is not None
        return hmac.compare_digest(self.login_csrf(login_cookie).encode(), submitted.encode())

    def _mac(self, purpose: str, *parts: str) -> str:
        message = "\n".join((purpose, *parts)).encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def session(self, session_id: str | None) -> Session | None:
        """The live session with this id, or None (unknown or idle too long)."""
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None or time.monotonic() - session.last_seen > SESSION_IDLE_SECONDS:
            self._sessions.pop(session_id, None)
            return None
        session.last_seen = time.monotonic()
        self._sessions.move_to_end(session_id)
        return session

    def end_session(self, session_id: str) -> None:
        """Log a session out."""
        self._sessions.pop(session_id, None)

    @staticmethod
    def csrf_ok(session: Session, submitted: str | None) -> bool:
        """Whether a POST carries the session's CSRF token."""
        return submitted is not None and hmac.compare_digest(session.csrf.encode(), submitted.encode())

    def _expire(self) -> None:
        # The table is in last-seen order: the idle ones are at its front.
        now = time.monotonic()
        while self._sessions and now - next(iter(self._sessions.values())).last_seen > SESSION_IDLE_SECONDS:
            self._sessions.popitem(last=False)


class LoginThrottle:
    """Failed sign-ins within a sliding window, per client address and in all (see the module
    docstring). Used on the server's event loop only; its memory is bounded (``MAX_THROTTLED_CLIENTS``
    addresses, the least recently failing forgotten first).

    Args:
        per_client: Failures one address may have within ``window`` seconds.
        total: Failures all addresses together may have within ``window`` seconds.
        window: The window, in seconds.
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        per_client: int = MAX_FAILED_LOGINS_PER_CLIENT,
        total: int = MAX_FAILED_LOGINS,
        window: float = LOGIN_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_client, self.total, self.window = per_client, total, window
        self._clock = clock
        self._clients: OrderedDict[str, deque[float]] = OrderedDict()
        self._all: deque[float] = deque(maxlen=total)

    def retry_after(self, client: str) -> int | None:
        """Seconds ``client`` must wait before its next sign-in is heard, or None: it may try now."""
        now = self._clock()
        waits = []
        failures = self._clients.get(client)
        if failures is not None and len(failures) >= self.per_client:
            waits.append(failures[0] + self.window - now)
        if len(self._all) >= self.total:
            waits.append(self._all[0] + self.window - now)
        wait = max(waits, default=0.0)
        return max(1, math.ceil(wait)) if wait > 0 else None

    def failed(self, client: str) -> None:
        """Count a wrong token from ``client``."""
        now = self._clock()
        failures = self._clients.pop(client, None) or deque(maxlen=self.per_client)
        failures.append(now)
        self._clients[client] = failures  # most recently failing last
        while len(self._clients) > MAX_THROTTLED_CLIENTS:
            self._clients.popitem(last=False)
        self._all.append(now)

    def succeeded(self, client: str) -> None:
        """Forget ``client``'s failures: it signed in."""
        self._clients.pop(client, None)


def cookie_header(session_id: str, *, max_age: int | None = None, name: str = COOKIE, path: str = "/") -> str:
    """The ``Set-Cookie`` value for a session (``max_age=0`` clears it) or another inbox cookie."""
    value = f"{name}={session_id}; Path={path}; HttpOnly; SameSite=Strict"
    if max_age is not None:
        value += f"; Max-Age={max_age}"
    return value


def session_id_from(cookie_header_value: str | None, name: str = COOKIE) -> str | None:
    """The session id (or the cookie ``name``'s value) in a request's ``Cookie`` header, if any."""
    from http.cookies import CookieError, SimpleCookie

    if not cookie_header_value:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(cookie_header_value)
    except CookieError:
        return None
    morsel = jar.get(name)
    return morsel.value if morsel else None
