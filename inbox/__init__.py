"""The web approval inbox (``agent-worker inbox --web``): server-rendered pages where approvers see
every request waiting for them and approve, edit or reject it, signed when the policy requires.

``app`` serves HTTP, ``auth`` maps people to principals (token or trusted-header mode), ``service``
talks to Temporal and holds every check that guards a decision, ``pages`` renders HTML.
"""

from inbox.app import InboxApp, build_app, cmd_inbox_web, running_inbox
from inbox.auth import Authenticator, InboxConfigError, load_tokens
from inbox.service import InboxError, InboxService

__all__ = [
    "Authenticator",
    "InboxApp",
    "InboxConfigError",
    "InboxError",
    "InboxService",
    "build_app",
    "cmd_inbox_web",
    "load_tokens",
    "running_inbox",
]
