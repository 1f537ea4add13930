"""The HTTP business writer: any API that honours an ``Idempotency-Key`` header and offers a lookup
(see ``base.py`` for the contract, ``examples/business_service`` for a service with this shape).

``POST {base_url}/records`` with ``Idempotency-Key: <operation key>`` and
``{"record_type", "tenant", "task_id", "payload"}`` writes; ``GET {base_url}/records/{key}`` looks up.
What each answer means, for a write:

=========================================================  ==========================================
201 / 200 with a receipt                                   the receipt (200 is a replay)
409                                                        ``WriteConflict`` with the server's message
422                                                        a ``rejected`` receipt, the message in detail
503, 429, 408 (the server says it did not apply it)        ``WriteUnavailable``: retry
connection refused, DNS failure, connect or pool timeout   ``WriteUnavailable``: nothing was sent
read timeout, reset, dropped after sending, other 5xx      ``WriteUnknown``: look the key up first
a 2xx whose body is not a receipt for this key             ``WriteUnknown``: it may have committed
any other 3xx or 4xx (400, 401, 403, 404, ...)             ``WriteError`` ``write_invalid``, not retried
=========================================================  ==========================================

A lookup has no effect, so its failures are ``WriteUnavailable`` (retried), except the answers above
that no retry will change (``write_invalid``); 404 is None.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
from agent_worker.activities.business.base import payload_digest
from agent_worker.activities.errors import WriteConflict, WriteError, WriteUnavailable, WriteUnknown
from agent_worker.schemas.writes import WriteInput, WriteOutcome, WriteReceipt

WRITE = "business.write"
LOOKUP = "business.lookup"

# The server answered that it did not apply the request: safe to send again.
_NOT_APPLIED = frozenset({408, 429, 503})
# Raised before a byte of the request left this process.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)


class HttpBusinessWriter:
    """A ``BusinessWriter`` over HTTP. Thread-safe: one pooled ``httpx.Client`` serves every thread.

    Args:
        base_url: the API root; ``/records`` is appended to it.
        timeout: seconds for each of connecting, sending, waiting for the answer.
        headers: sent with every request (e.g. ``Authorization``); never logged.
    """

    def __init__(
        self, base_url: str, *, timeout: float = 10.0, headers: dict[str, str] | None = None
    ) -> None:
        url = httpx.URL(base_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"the business API URL must be http(s)://host[:port][/path], not {base_url!r}")
        self.base_url = base_url
        self._client = httpx.Client(base_url=url, timeout=timeout, headers=headers)

    def write(self, input: WriteInput) -> WriteReceipt:
        """Commit under the operation key, or return the receipt the key already has."""
        body = {
            "record_type": input.record_type,
            "tenant": input.tenant,
            "task_id": input.task_id,
            "payload": input.payload,
        }
        try:
            response = self._client.post(
                "/records", json=body, headers={"Idempotency-Key": input.operation_key}
            )
        except _NOT_SENT as err:
            raise WriteUnavailable(f"business API unreachable: {_describe(err)}", operation=WRITE) from err
        except httpx.TransportError as err:
            # The request may have reached the server: only a lookup can tell.
            raise WriteUnknown(f"business API response lost: {_describe(err)}", operation=WRITE) from err

        status = response.status_code
        if status == 409:
            raise WriteConflict(_message(response), operation=WRITE)
        if status == 422:
            return WriteReceipt(
                operation_key=input.operation_key,
                outcome=WriteOutcome.REJECTED,
                record_type=input.record_type,
                payload_digest=payload_digest(input),
                detail=_message(response),
            )
        if status in _NOT_APPLIED:
            raise WriteUnavailable(
                f"business API did not apply the write: {_summary(response)}", operation=WRITE
            )
        if response.is_server_error:
            raise WriteUnknown(f"business API failed: {_summary(response)}", operation=WRITE)
        if not response.is_success:
            raise WriteError(
                f"business API refused the request: {_summary(response)}",
                code="write_invalid",
                operation=WRITE,
                retryable="no",
            )
        receipt = _receipt(
            response, input.operation_key, record_type=input.record_type, payload_digest=payload_digest(input)
        )
        if receipt is None:
            raise WriteUnknown(
                f"business API answered {status} without a receipt for the key", operation=WRITE
            )
        return receipt.model_copy(update={"replayed": True}) if status == 200 else receipt

    def lookup(self, operation_key: str) -> WriteReceipt | None:
        """The receipt committed under ``operation_key``, or None."""
        try:
            response = self._client.get(f"/records/{quote(operation_key, safe='')}")
        except httpx.TransportError as err:
            raise WriteUnavailable(f"business API lookup failed: {_describe(err)}", operation=LOOKUP) from err
        status = response.status_code
        if status == 404:
            return None
        if response.is_success:
            receipt = _receipt(response, operation_key)
            if receipt is not None:
                return receipt
        elif status not in _NOT_APPLIED and not response.is_server_error:
            raise WriteError(
                f"business API refused the lookup: {_summary(response)}",
                code="write_invalid",
                operation=LOOKUP,
                retryable="no",
            )
        raise WriteUnavailable(f"business API lookup failed: {_summary(response)}", operation=LOOKUP)

    def close(self) -> None:
        """Close the pooled connections."""
        self._client.close()

    def __enter__(self) -> HttpBusinessWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def http_writer(base_url: str, **kw: Any) -> HttpBusinessWriter:
    """Factory for ``load_writer``: an ``HttpBusinessWriter`` on ``base_url``."""
    return HttpBusinessWriter(base_url, **kw)


def _receipt(response: httpx.Response, operation_key: str, **defaults: Any) -> WriteReceipt | None:
    """The receipt in ``response`` for ``operation_key``, or None when the body is not one.

    Fields a minimal API may leave out are filled in: the key, outcome ``committed`` (a 2xx means the
    record is there), and ``defaults`` (for a write, its record type and digest).
    """
    try:
        body = response.json()
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    given = {name: value for name, value in body.items() if value is not None}
    try:
        receipt = WriteReceipt.model_validate(
            {"operation_key": operation_key, "outcome": WriteOutcome.COMMITTED, **defaults, **given}
        )
    except ValueError:
        return None
    return receipt if receipt.operation_key == operation_key else None


def _message(response: httpx.Response) -> str:
    """The server's error message: ``{"error": ...}`` when it sent one, else its body or status."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return body["error"]
    return response.text.strip()[:500] or f"HTTP {response.status_code} {response.reason_phrase}"


def _summary(response: httpx.Response) -> str:
    return f"HTTP {response.status_code}: {_message(response)}"


def _describe(err: httpx.TransportError) -> str:
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


__all__ = ["HttpBusinessWriter", "http_writer"]
