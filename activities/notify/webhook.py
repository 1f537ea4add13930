"""A generic webhook notifier: one JSON POST per notification, with a Slack-compatible body (a
``text`` field, which a Slack incoming webhook shows as is) and the notification's fields under
``agent_worker`` for any other receiver."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
from agent_worker.activities.errors import NotifyError
from agent_worker.schemas.notify import NotifyInput


class WebhookNotifier:
    """POSTs to ``url``; the notification's key goes as the ``Idempotency-Key`` header, percent-encoded
    where it holds a character a header cannot carry (a task id started outside the client, CLI and
    API may hold a line break; such a header is refused by httpx and the send would retry for good)."""

    channel = "webhook"

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url
        self.timeout = timeout

    def unaddressed(self, note: NotifyInput) -> list[str]:
        return []  # the receiver routes it; every recipient is named in the body

    async def send(self, note: NotifyInput, text: str) -> None:
        """Deliver ``note``.

        Raises:
            NotifyError: the receiver could not be reached or did not answer 2xx (retryable unless
                it refused the request with a 4xx other than 408 and 429).
        """
        body: dict[str, Any] = {"text": text, "agent_worker": note.model_dump(mode="json")}
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                response = await client.post(
                    self.url, json=body, headers={"Idempotency-Key": header_safe(note.key)}
                )
        except httpx.HTTPError as err:
            raise NotifyError(
                f"webhook {self.url} unreachable: {err}", operation="notify.send", retryable="yes"
            ) from err
        if response.is_success:
            return
        refused = 400 <= response.status_code < 500 and response.status_code not in (408, 429)
        raise NotifyError(
            f"webhook {self.url} answered {response.status_code}: {response.text[:200]}",
            operation="notify.send",
            retryable="no" if refused else "yes",
        )


def header_safe(value: str) -> str:
    """``value`` unchanged if it is a plain token, else percent-encoded (no CR, LF or non-ASCII)."""
    return quote(value, safe="/:@._-~+=!$&'()*,;")
