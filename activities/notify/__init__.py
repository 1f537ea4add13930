"""Notifying people about approval requests: reminders and escalations (``notify.send``).

A policy rule's ``sla`` makes the task remind its approvers and escalate to a next group on durable
timers; each time the workflow runs ``notify.send`` once, and this package delivers it through every
notifier the worker is configured with: a generic webhook with a Slack-compatible body
(``notify_webhook_url``) and email over SMTP (``notify_smtp_url``, addresses from ``notify_emails``).

Once per reminder: the workflow records a notification as sent only when the activity completes, and
the activity keeps a ledger of what each notifier took (``NotificationLedger``, keyed by the
notification's key), so a retried attempt, or one repeated after a worker loss, does not send again.
One narrow gap stays: a worker that dies after a notifier took the message and before the ledger
recorded it sends it again on the retry. The copy carries the same key (the webhook's
``Idempotency-Key`` header, the email's ``Message-ID``), so a receiver can drop it.
"""

from __future__ import annotations

from agent_worker.activities.notify.activities import NotifyActivities, build_notifiers
from agent_worker.activities.notify.email import EmailNotifier
from agent_worker.activities.notify.ledger import NotificationLedger
from agent_worker.activities.notify.webhook import WebhookNotifier

__all__ = ["EmailNotifier", "NotificationLedger", "NotifyActivities", "WebhookNotifier", "build_notifiers"]
