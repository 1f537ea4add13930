"""The web approval inbox (``agent-worker inbox --web``): server-rendered pages where approvers see
every request waiting for them and approve, edit or reject it, signed when the policy requires.

``app`` routes HTTP (Starlette, served by uvicorn through ``serve``, as the HTTP API is), ``auth``
maps people to principals (token or trusted-header mode), ``service`` talks to Temporal and holds
every check that guards a decision, ``pages`` renders HTML, ``live`` follows a task's live stream
on its page. Serving needs the ``api`` extra (``pip install 'agent-worker[api]'``).
"""

from agent_worker.inbox.app import InboxApp
from agent_worker.inbox.auth import Authenticator, InboxConfigError, load_tokens
from agent_worker.inbox.serve import build_app, cmd_inbox_web, running_inbox
from agent_worker.inbox.service import InboxError, InboxService

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
