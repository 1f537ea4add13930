"""Stream tokens: how a browser app follows a task, since ``EventSource`` cannot send a bearer token.

The app asks, with its bearer token, ``POST /v1/tasks/{id}/stream-token`` and gets a short-lived
token for that one task, then opens ``EventSource(".../v1/tasks/{id}/events?access_token=<token>")``
(or ``/stream``). A stream token opens those two routes of that task and nothing else: not another
task, not a read or a write, not as a bearer token. It expires (``api_stream_token_minutes``); an
open stream runs on, but a reconnect after expiry is refused (401) and the app asks for a new token.

A token is ``st1.<payload>.<mac>``: the payload (base64url JSON: principal, task id, expiry) signed
with HMAC-SHA256 under the API's key (``api_stream_token_secret``, else a random key per process).
Nothing is stored for it. The principal in it is checked again on every use, as a bearer token's
would be: a principal who may no longer see the task is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable

PREFIX = "st1."
# The routes a stream token opens: GET /v1/tasks/{id}/<one of these>.
STREAM_ROUTES = ("events", "stream")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class StreamTokens:
    """Issues and checks stream tokens.

    Args:
        seconds: How long a token is valid.
        secret: The signing key; None: a random one (tokens die with the process).
        clock: Seconds since the epoch (``time.time``; tests pass their own).
    """

    def __init__(
        self, seconds: float, secret: bytes | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.seconds = seconds
        key = secret or secrets.token_bytes(32)
        self._key = hashlib.sha256(b"agent-worker stream token\n" + key).digest()
        self._clock = clock

    def issue(self, principal: str, task_id: str) -> tuple[str, float]:
        """A token for ``principal`` to follow ``task_id``, and when it expires (epoch seconds)."""
        expires = self._clock() + self.seconds
        claims = {"p": principal, "t": task_id, "e": expires}
        payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
        return f"{PREFIX}{payload}.{self._mac(payload)}", expires

    def principal(self, token: str, task_id: str) -> str | None:
        """The principal ``token`` names when it is ours, unexpired, and made for ``task_id``."""
        if not token.startswith(PREFIX) or token.count(".") != 2:
            return None
        payload, _, mac = token[len(PREFIX) :].partition(".")
        if not hmac.compare_digest(self._mac(payload).encode(), mac.encode()):
            return None
        try:
            claims = json.loads(_unb64(payload))
        except ValueError:
            return None
        if claims.get("t") != task_id or not float(claims.get("e", 0)) > self._clock():
            return None
        principal = claims.get("p")
        return principal if isinstance(principal, str) and principal else None

    def _mac(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())


def stream_route(method: str, path: str) -> str | None:
    """The task id of a stream route (``GET /v1/tasks/{id}/events`` or ``/stream``), else None."""
    if method != "GET" or not path.startswith("/v1/tasks/"):
        return None
    task_id, _, last = path[len("/v1/tasks/") :].rpartition("/")
    return task_id if task_id and last in STREAM_ROUTES else None


__all__ = ["PREFIX", "STREAM_ROUTES", "StreamTokens", "stream_route"]
