"""The inbox's ``/grants`` page: the remembered grants a principal gave, each active one with a
revoke form.

A principal sees and revokes only their own grants here (the API, with tenants configured, lets an
approver revoke their tenants' grants too). Values are escaped as everywhere in the inbox
(``inbox.pages._e``); the revoke form carries the session's CSRF token, checked by ``InboxApp``.
"""

from __future__ import annotations

from agent_worker.inbox.pages import _e, layout
from agent_worker.schemas.grants import Grant


def grants_page(principal: str, csrf: str, grants: list[Grant]) -> str:
    """The grants ``principal`` gave: active ones with a revoke control, then ended ones."""
    rows = "".join(_grant_html(g, csrf) for g in grants) or '<p class="muted" id="no-grants">No grants.</p>'
    body = (
        '<div class="card"><h1>Your remembered grants</h1>'
        '<p class="muted">Each approves later matching actions in your name until it is revoked, '
        "expires, or voids itself (the tool's schema, the policy or the agent's version changed).</p>"
        f"{rows}</div>"
    )
    return layout("Remembered grants", body, principal=principal, csrf=csrf)


def _grant_html(grant: Grant, csrf: str) -> str:
    remember = grant.remember
    scope = {
        "agent": f"agent {grant.agent}",
        "thread": f"thread {grant.thread}",
        "tenant": "the whole tenant",
    }
    control = ""
    if grant.status == "active":
        control = (
            f'<form method="post" action="/grants/{_e(grant.grant_id)}/revoke" class="revoke">'
            f'<input type="hidden" name="csrf" value="{_e(csrf)}">'
            '<input type="text" name="reason" placeholder="why (recorded)">'
            '<button class="reject">Revoke</button></form>'
        )
    ended = f" ({_e(grant.status_reason)})" if grant.status != "active" else ""
    return (
        f'<section class="grant" id="grant-{_e(grant.grant_id)}"><h3>{_e(grant.tool)} · '
        f'<code>{_e(grant.grant_id)}</code> <span class="badge status">{_e(grant.status)}</span>{ended}</h3>'
        "<dl>"
        f"<dt>tenant</dt><dd>{_e(grant.tenant)}</dd>"
        f"<dt>for</dt><dd>{_e(scope[remember.scope])}</dd>"
        f"<dt>when</dt><dd><code>{_e(remember.when or 'any arguments')}</code></dd>"
        f"<dt>until</dt><dd>{_e(remember.until.isoformat() if remember.until else 'revoked')}</dd>"
        f"<dt>given</dt><dd>{_e(grant.created_at.isoformat(timespec='seconds'))} on {_e(grant.task_id)}</dd>"
        f"</dl>{control}</section>"
    )


__all__ = ["grants_page"]
