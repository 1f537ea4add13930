"""Email over SMTP: one message per notification to the recipients that have an address
(``notify_emails``: principal to address). The standard library's ``smtplib`` speaks SMTP; it runs
in a thread. ``Message-ID`` is derived from the notification's key, so a receiver can drop a copy."""

from __future__ import annotations

import asyncio
import hashlib
import smtplib
from email.message import EmailMessage
from urllib.parse import urlsplit

from agent_worker.activities.errors import NotifyError
from agent_worker.schemas.notify import NotifyInput


class EmailNotifier:
    """Sends through the SMTP server at ``url`` (``smtp://host:port``; ``smtps://`` for TLS from the
    start; user and password in the URL when the server wants them)."""

    channel = "email"

    def __init__(self, url: str, sender: str, addresses: dict[str, str], timeout: float = 10.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("smtp", "smtps") or not parts.hostname:
            raise ValueError(f"notify_smtp_url must look like smtp://host:port, not {url!r}")
        self.url = url
        self.parts = parts
        self.sender = sender
        self.addresses = addresses
        self.timeout = timeout

    def recipients(self, note: NotifyInput) -> tuple[list[str], list[str]]:
        """(addresses to send to, principals without an address)."""
        found = [self.addresses[p] for p in note.recipients if p in self.addresses]
        return sorted(set(found)), [p for p in note.recipients if p not in self.addresses]

    def unaddressed(self, note: NotifyInput) -> list[str]:
        return self.recipients(note)[1]

    async def send(self, note: NotifyInput, text: str) -> None:
        """Deliver ``note`` to its recipients' addresses (nothing to send: returns).

        Raises:
            NotifyError: the server could not be reached, or refused the message (retryable unless it
                refused every recipient for good).
        """
        to, _ = self.recipients(note)
        if not to:
            return
        message = EmailMessage()
        message["From"] = self.sender
        message["To"] = ", ".join(to)
        task = printable(note.task_id)
        message["Subject"] = (
            f"[agent-worker] budget: {note.budget.budget} of task {task} past its soft limit"
            if note.budget is not None
            else f"[agent-worker] {note.kind}: {note.tool} waits for approval ({note.request_id})"
        )
        message["Message-ID"] = f"<{hashlib.sha256(note.key.encode()).hexdigest()[:40]}@agent-worker>"
        message.set_content(text)
        await asyncio.to_thread(self._deliver, message)

    def _deliver(self, message: EmailMessage) -> None:
        parts = self.parts
        smtp_class = smtplib.SMTP_SSL if parts.scheme == "smtps" else smtplib.SMTP
        port = parts.port or (465 if parts.scheme == "smtps" else 25)
        try:
            with smtp_class(parts.hostname, port, timeout=self.timeout) as smtp:
                if parts.username:
                    smtp.login(parts.username, parts.password or "")
                smtp.send_message(message)
        except smtplib.SMTPRecipientsRefused as err:
            raise NotifyError(
                f"SMTP {parts.hostname}:{port} refused every recipient: {err.recipients}",
                operation="notify.send",
                retryable="no",
            ) from err
        except (OSError, smtplib.SMTPException) as err:
            raise NotifyError(
                f"SMTP {parts.hostname}:{port}: {err}", operation="notify.send", retryable="yes"
            ) from err


def printable(value: str) -> str:
    """``value`` with control characters escaped (``\\r\\n``): a header must not break a line."""
    return value.encode("unicode_escape").decode("ascii") if not value.isprintable() else value
