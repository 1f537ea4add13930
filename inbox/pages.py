"""The inbox's HTML: server-rendered pages; no JavaScript but the task page's live stream
(``inbox.live``).

Every value that comes from a task, a request, a form or a header goes through ``html.escape``
(``_e``) before it reaches a page, attribute values included; task ids in links are also
percent-encoded. A task page that has nothing for the viewer to decide refreshes itself (a meta
refresh) so a person can watch it finish; a page with forms never does, so typing is never lost.
With the live stream, its script redraws the page once the task closes instead (the meta refresh
stays, inside ``<noscript>``, for a browser without JavaScript).
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote

from agent_worker.inbox.grants import remember_controls
from agent_worker.inbox.questions import question_html, respond_form
from agent_worker.inbox.service import ArtifactPreview, InboxEntry, TaskView
from agent_worker.schemas.actions import BudgetRaise, BusinessWrite, Delegation, SandboxCommand
from agent_worker.schemas.approvals import ApprovalRequest, DecisionOutcome
from agent_worker.schemas.questions import Question
from agent_worker.schemas.tasks import BatchView, TaskResult

REFRESH_SECONDS = 2

_CSS = """
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1d2430;background:#f5f6f8}
header{background:#1d2430;color:#fff;padding:.6em 1.2em;display:flex;gap:1em;align-items:center}
header a{color:#fff;text-decoration:none;font-weight:600}header .who{margin-left:auto}
header form{display:inline;margin:0}main{max-width:980px;margin:1.2em auto;padding:0 1em}
.card{background:#fff;border:1px solid #d9dde3;border-radius:6px;padding:1em 1.2em;margin:1em 0}
h1{font-size:1.4em}h2{font-size:1.15em;margin:.2em 0}h3{font-size:1em;margin:1em 0 .3em}
dl{display:grid;grid-template-columns:9em 1fr;gap:.2em .8em;margin:.4em 0}dt{color:#5b6573}dd{margin:0}
code,pre{font:13px/1.4 ui-monospace,monospace}pre{background:#f0f2f5;padding:.6em;overflow:auto;
white-space:pre-wrap;word-break:break-word;max-height:28em;margin:.3em 0}
table{border-collapse:collapse;width:100%}td,th{border-top:1px solid #e3e6ea;padding:.3em .5em;
text-align:left;vertical-align:top}th{width:12em;color:#5b6573;font-weight:500}
.controls{display:grid;grid-template-columns:1fr 2fr 1.4fr;gap:1em;margin-top:1em}
.controls form{border:1px solid #e3e6ea;border-radius:5px;padding:.7em}
textarea,input[type=text],input[type=password]{width:100%;box-sizing:border-box;
font:13px ui-monospace,monospace}
button{font:inherit;padding:.35em .9em;border-radius:4px;border:1px solid #888;background:#fff;cursor:pointer}
button.approve{background:#1a7f37;color:#fff;border-color:#1a7f37}button.reject{background:#b42318;
color:#fff;border-color:#b42318}.badge{display:inline-block;padding:0 .5em;border-radius:9px;
background:#e3e6ea;font-size:.85em}.ok{color:#1a7f37}.bad{color:#b42318}.muted{color:#5b6573}
.phase-completed{background:#d3f0db}.phase-awaiting_approval{background:#fff1c2}
.phase-failed,.phase-rejected,.phase-cancelled,.phase-handed_off{background:#f8d7d3}
#live-log{max-height:36em;overflow:auto}#live-log pre.text{background:#fff;border-left:3px solid #1a7f37;
max-height:none}#live-log p.entry{margin:.15em 0;font:13px/1.4 ui-monospace,monospace;color:#5b6573;
word-break:break-word}#live-log p.event{color:#1d2430}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def task_url(task_id: str) -> str:
    """The task page's path (the id percent-encoded, slashes included)."""
    return "/tasks/" + quote(task_id, safe="")


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def layout(
    title: str,
    body: str,
    *,
    principal: str | None = None,
    csrf: str | None = None,
    refresh: bool = False,
    script: str | None = None,
) -> str:
    """A full page around ``body`` (already HTML); ``script``: the path of a same-origin script to
    load (then a refresh only applies without JavaScript)."""
    who = ""
    if principal is not None:
        who = f'<span class="who">signed in as <b id="principal">{_e(principal)}</b></span>'
        if csrf is not None:
            who += (
                '<form method="post" action="/logout">'
                f'<input type="hidden" name="csrf" value="{_e(csrf)}"><button>Log out</button></form>'
            )
    meta = f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">' if refresh else ""
    if script is not None:
        noscript = f"<noscript>{meta}</noscript>" if meta else ""
        meta = noscript + f'<script src="{_e(script)}" defer></script>'
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width">{meta}<title>{_e(title)}</title>'
        f"<style>{_CSS}</style></head><body>"
        f'<header><a href="/">Approval inbox</a><a href="/grants">Grants</a>{who}</header>'
        f"<main>{body}</main></body></html>"
    )


def login_page(problem: str | None = None, *, csrf: str = "") -> str:
    """The token login form (``csrf``: the token bound to the browser's pre-login cookie)."""
    note = f'<p class="bad" id="problem">{_e(problem)}</p>' if problem else ""
    body = (
        '<div class="card"><h1>Sign in</h1>'
        "<p>Paste the access token you were given. It maps you to your approver name.</p>"
        f'{note}<form method="post" action="/login">'
        f'<input type="hidden" name="csrf" value="{_e(csrf)}">'
        '<input type="password" name="token" id="token" autocomplete="current-password" required>'
        '<p><button id="login">Sign in</button></p></form></div>'
    )
    return layout("Sign in", body)


def error_page(status: int, message: str, *, principal: str | None = None, csrf: str | None = None) -> str:
    """A page that says what went wrong and where to go next."""
    import http

    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    body = (
        f'<div class="card"><h1>{status} {_e(phrase)}</h1><p id="error">{_e(message)}</p>'
        '<p><a href="/">Back to the inbox</a></p></div>'
    )
    return layout(f"{status} {phrase}", body, principal=principal, csrf=csrf)


def inbox_page(
    principal: str,
    csrf: str,
    entries: list[InboxEntry],
    previews: Callable[[ApprovalRequest], list[ArtifactPreview]],
) -> str:
    """Every request the principal may decide, grouped by task, with the controls."""
    if not entries:
        body = (
            '<div class="card" id="empty"><h1>Nothing to approve</h1>'
            f"<p>No task is waiting for {_e(principal)}.</p></div>"
        )
        return layout("Approval inbox", body, principal=principal, csrf=csrf)
    parts = [f"<h1>Waiting for {_e(principal)}</h1>"]
    for entry in entries:
        parts.append(f'<div class="card task" id="task-{_e(entry.task_id)}">')
        parts.append(
            f'<h2><a href="{_e(task_url(entry.task_id))}">{_e(entry.task_id)}</a></h2>'
            f'<p class="muted">agent {_e(entry.agent)} · tenant {_e(entry.tenant)}</p>'
        )
        if entry.error:
            parts.append(f'<p class="bad">Details unavailable: {_e(entry.error)}</p>')
        parts.append(context_html(entry.prompt, entry.batch))
        parts += [request_html(entry.task_id, r, csrf, previews(r)) for r in entry.requests]
        parts.append("</div>")
    return layout("Approval inbox", "".join(parts), principal=principal, csrf=csrf)


def context_html(prompt: str, batch: list[BatchView]) -> str:
    """What a request is part of: the task's prompt (an excerpt) and every call of the model
    response, with the results already known (allowed calls run before the approvals they sit
    beside)."""
    parts = [f'<p class="prompt">task: <q>{_e(prompt)}</q></p>'] if prompt else []
    if batch:
        rows = "".join(
            f'<tr id="call-{_e(v.call_id)}"><td>{_e(v.tool)}</td><td>{_e(v.verdict.value)}</td>'
            f'<td class="state">{_e(v.state)}</td><td><pre>{_e(v.output or "")}</pre></td></tr>'
            for v in batch
        )
        parts.append(
            "<h3>This model response's calls</h3>"
            '<table class="batch"><tr><th>tool</th><th>policy</th><th>state</th><th>result</th></tr>'
            f"{rows}</table>"
        )
    return "".join(parts)


def request_html(
    task_id: str, request: ApprovalRequest, csrf: str, previews: Iterable[ArtifactPreview]
) -> str:
    """One pending request: what it does, what it will write, its version, and its controls (a
    question: what it asks, and the forms that answer it, ``inbox.questions``)."""
    action = request.action
    if isinstance(action.operation, Question):
        return question_html(task_url(task_id) + "/decide", request, csrf)
    rid = _e(request.request_id)
    args_rows = "".join(
        f"<tr><th>{_e(k)}</th><td><pre>{_e(_json(v))}</pre></td></tr>"
        for k, v in sorted(action.arguments.items())
    )
    return (
        f'<section class="request" id="request-{rid}" data-version="{_e(request.version)}">'
        f'<h3>{_e(action.tool)} <span class="badge">{_e(action.effect.value)}</span> · {rid}</h3>'
        "<dl>"
        + (f'<dt>proposed by</dt><dd class="agent">{_e(action.agent)}</dd>' if action.agent else "")
        + f"<dt>why</dt><dd>{_e(request.reason or '-')}</dd>"
        f"<dt>approvers</dt><dd>{_e(', '.join(request.approvers))}</dd>"
        + (f'<dt>quorum</dt><dd class="quorum">{_e(request.progress)}</dd>' if request.quorum else "")
        + f'<dt>version</dt><dd><code class="version">{_e(request.version)}</code></dd>'
        f"<dt>requested</dt><dd>{_e(request.requested_at.isoformat(timespec='seconds'))}</dd>"
        f"<dt>deadline</dt><dd>{_e(request.deadline.isoformat(timespec='seconds'))}</dd>"
        "</dl>"
        f'<h3>Arguments</h3><table class="args">{args_rows}</table>'
        f"{_operation_html(action.operation, previews)}"
        f"{_controls(task_id, request, csrf)}"
        "</section>"
    )


def _operation_html(operation: Any, previews: Iterable[ArtifactPreview]) -> str:
    if isinstance(operation, BusinessWrite):
        rows = "".join(
            f"<tr><th>{_e(k)}</th><td><pre>{_e(_json(v))}</pre></td></tr>"
            for k, v in sorted(operation.payload.items())
        )
        out = (
            f"<h3>It will write a <code>{_e(operation.record_type)}</code> record</h3>"
            f'<table class="payload">{rows}</table>'
        )
        for p in previews:
            out += f"<h3>Artifact <code>{_e(p.digest)}</code></h3>"
            if p.text is not None:
                more = f" (first {len(p.text.encode())} of {p.size} bytes)" if p.truncated else ""
                out += f'<p class="muted">{_e(p.size)} bytes{_e(more)}</p>'
                out += f'<pre class="artifact">{_e(p.text)}</pre>'
            else:
                out += f'<p class="muted">No preview: {_e(p.problem)}</p>'
        return out
    if isinstance(operation, SandboxCommand):
        out = f"<h3>It will run in the task's sandbox</h3><pre>{_e(_json(operation.argv))}</pre>"
        if operation.stdin:
            out += f"<p class='muted'>with standard input</p><pre>{_e(operation.stdin)}</pre>"
        return out
    if isinstance(operation, Delegation):
        return (
            f"<h3>It will start a sub-task for agent <code>{_e(operation.agent)}</code></h3>"
            f"<pre>{_e(operation.prompt)}</pre>"
        )
    return ""


def _controls(task_id: str, request: ApprovalRequest, csrf: str) -> str:
    action = _e(task_url(task_id) + "/decide")
    hidden = (
        f'<input type="hidden" name="csrf" value="{_e(csrf)}">'
        f'<input type="hidden" name="request_id" value="{_e(request.request_id)}">'
        f'<input type="hidden" name="version" value="{_e(request.version)}">'
    )
    args = _e(_json(request.action.arguments))
    # A quorum's approvers all approve the same version: an edit would change it (the task refuses it).
    edit = (
        ""
        if request.quorum
        else f'<form method="post" action="{action}" class="edit">{hidden}'
        '<input type="hidden" name="decision" value="edit">'
        "<b>Edit the arguments (JSON), then approve</b>"
        f'<textarea name="edited_args" rows="8">{args}</textarea>'
        '<p><input type="text" name="reason" placeholder="why the change (optional)"></p>'
        "<button>Approve with these arguments</button></form>"
    )
    # The task's own budget extension is approved or not; there is no call for a message to answer;
    # nor for a quorum, whose approvers decide the action itself.
    extension = isinstance(request.action.operation, BudgetRaise)
    respond = (
        "" if extension or request.quorum else respond_form(task_url(task_id) + "/decide", request, csrf)
    )
    return (
        '<div class="controls">'
        f'<form method="post" action="{action}" class="approve">{hidden}'
        '<input type="hidden" name="decision" value="approve">'
        "<b>Approve as proposed</b>"
        '<p><input type="text" name="reason" placeholder="note (optional)"></p>'
        f"{'' if request.quorum else remember_controls()}"
        '<button class="approve">Approve</button></form>'
        f"{edit}"
        f'<form method="post" action="{action}" class="reject">{hidden}'
        '<input type="hidden" name="decision" value="reject">'
        "<b>Reject</b>"
        '<p><textarea name="reason" rows="3" required placeholder="why (the agent sees this)"></textarea></p>'
        '<button class="reject">Reject</button></form>'
        f"{respond}"
        "</div>"
    )


def outcome_page(principal: str, csrf: str, task_id: str, outcome: DecisionOutcome) -> str:
    """What became of a decision the workflow answered."""
    verdict = "accepted" if outcome.accepted else "refused"
    klass = "ok" if outcome.accepted else "bad"
    body = (
        f'<div class="card"><h1 class="{klass}" id="outcome">Decision {verdict}</h1>'
        f"<p>{_e(task_id)} · {_e(outcome.request_id)}: {_e(outcome.detail)}</p>"
        f"<p>The task is now <b>{_e(outcome.phase)}</b>.</p>"
        f'<p><a id="follow" href="{_e(task_url(task_id))}">Follow the task</a> · '
        '<a href="/">Back to the inbox</a></p>'
        "</div>"
    )
    return layout(f"Decision {verdict}", body, principal=principal, csrf=csrf)


def task_page(
    principal: str,
    csrf: str,
    view: TaskView,
    previews: Callable[[ApprovalRequest], list[ArtifactPreview]],
    *,
    live_script: str | None = None,
) -> str:
    """A task as ``principal`` may see it; refreshes itself while it runs with nothing to decide.
    With ``live_script`` (the inbox has a stream backend), it shows the task's live stream."""
    phase = _phase(view)
    parts = [
        f'<div class="card"><h1>{_e(view.task_id)}</h1>'
        f'<p>phase <span class="badge phase-{_e(phase)}" id="phase">{_e(phase)}</span></p>'
    ]
    status, result = view.status, view.result
    if status is not None:
        parts.append(
            f'<p class="muted">agent {_e(status.agent)} · tenant {_e(status.tenant)} · '
            f"turn {_e(status.turn)}</p>"
        )
        parts.append(context_html(status.prompt, status.batch))
    reason = (result.reason if result else None) or (status.reason if status else None) or view.problem
    if reason:
        parts.append(f'<p id="reason">{_e(reason)}</p>')
    output = (result.final_output if result else None) or (status.final_output if status else None)
    if output:
        parts.append(f'<h3>Agent output</h3><pre id="final-output">{_e(output)}</pre>')
    if result is not None:
        parts.append(_evidence_html(result))
    if view.running and not view.decidable:
        if status is not None and status.phase.terminal:
            note = "finishing"  # the phase is final; the workflow has not closed yet
        else:
            note = "waiting for other approvers" if view.others_pending else "working"
        parts.append(f'<p class="muted">The task is {note}; this page refreshes itself.</p>')
    parts.append("</div>")
    parts += [
        f'<div class="card">{request_html(view.task_id, r, csrf, previews(r))}</div>' for r in view.decidable
    ]
    if live_script is not None:
        parts.append(live_html(view.task_id, view.running))
    refresh = view.running and not view.decidable
    return layout(
        view.task_id, "".join(parts), principal=principal, csrf=csrf, refresh=refresh, script=live_script
    )


def live_html(task_id: str, running: bool) -> str:
    """The box the live stream's script writes into (``data-running``: redraw the page at the end)."""
    return (
        f'<div class="card" id="live" data-src="{_e(task_url(task_id) + "/stream")}" '
        f'data-running="{1 if running else 0}"><h3>Live</h3>'
        '<p class="muted" id="live-state">The live stream needs JavaScript.</p>'
        '<div id="live-log"></div></div>'
    )


def _phase(view: TaskView) -> str:
    if view.result is not None:
        return view.result.phase.value
    if view.status is not None:
        return view.status.phase.value
    return view.closed_as or ("running" if view.running else "closed")


def _evidence_html(result: TaskResult) -> str:
    ev = result.evidence
    approvals = "".join(
        f"<li>{_e(d.request_id)}: {_e(d.decision.value)} by {_e(d.principal)} via {_e(d.via)}"
        + (f" <code>{_e(d.grant_id)}</code>" if d.grant_id else "")
        + (f" (remembered as <code>{_e(d.remembered_as)}</code>)" if d.remembered_as else "")
        + "</li>"
        for d in ev.approvals
    )
    writes = "".join(
        f"<li>{_e(w.receipt.record_id or w.receipt.outcome.value)} under "
        f"<code>{_e(w.operation_key)}</code>, confirmed by lookup: "
        f"{'yes' if w.confirmed else 'unknown' if w.confirmed is None else 'NO'}</li>"
        for w in ev.writes
    )
    missing = "".join(f"<li>{_e(m)}</li>" for m in ev.missing)
    none = "<li>none</li>"
    out = f"<h3>Approvals</h3><ul>{approvals or none}</ul><h3>Writes</h3><ul>{writes or none}</ul>"
    if missing:
        out += f'<h3 class="bad">Missing evidence</h3><ul>{missing}</ul>'
    return f'<div id="evidence">{out}</div>'
