"""The inbox's HTML for a question the agent asks (``ask_human``) and for the ``respond`` decision.

A question shows what it asks and one form to answer it: a text box, one button per option, or a
JSON textarea prefilled with a skeleton of the form's fields (its JSON Schema shown beside it). It
may also be declined (a ``reject`` the agent reads). The respond form sits beside an action's other
controls. Every value is escaped (``html.escape``), as everywhere in the inbox.
"""

from __future__ import annotations

import html
import json
from typing import Any

from agent_worker.schemas.approvals import ApprovalRequest
from agent_worker.schemas.questions import AnswerType, Question


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _hidden(request: ApprovalRequest, csrf: str, decision: str) -> str:
    return (
        f'<input type="hidden" name="csrf" value="{_e(csrf)}">'
        f'<input type="hidden" name="request_id" value="{_e(request.request_id)}">'
        f'<input type="hidden" name="version" value="{_e(request.version)}">'
        f'<input type="hidden" name="decision" value="{_e(decision)}">'
    )


def question_html(action_url: str, request: ApprovalRequest, csrf: str) -> str:
    """A pending question: what it asks, who may answer, and the forms that answer or decline it."""
    question = request.action.operation
    assert isinstance(question, Question)
    rid = _e(request.request_id)
    hidden = _hidden(request, csrf, "answer")
    if question.answer_type is AnswerType.CHOICE:
        answer = (
            "<b>Choose one</b><p>"
            + " ".join(
                f'<button name="answer" value="{_e(o)}" class="approve option">{_e(o)}</button>'
                for o in question.options
            )
            + "</p>"
        )
    elif question.answer_type is AnswerType.FORM:
        skeleton = {name: None for name in (question.form or {}).get("properties", {})}
        answer = (
            "<b>Answer (JSON, checked against the form)</b>"
            f'<pre class="form-schema">{_e(json.dumps(question.form, indent=2, sort_keys=True))}</pre>'
            f'<textarea name="answer" rows="8">{_e(json.dumps(skeleton, indent=2))}</textarea>'
            '<p><button class="approve">Answer</button></p>'
        )
    else:
        answer = (
            '<b>Answer</b><p><textarea name="answer" rows="4" required></textarea></p>'
            '<p><button class="approve">Answer</button></p>'
        )
    return (
        f'<section class="request question" id="request-{rid}" data-version="{_e(request.version)}">'
        f'<h3>The agent asks <span class="badge">{_e(question.answer_type.value)}</span> · {rid}</h3>'
        f'<p class="question-text"><b>{_e(question.question)}</b></p>'
        "<dl>"
        f"<dt>who may answer</dt><dd>{_e(', '.join(request.approvers))}</dd>"
        f"<dt>deadline</dt><dd>{_e(request.deadline.isoformat(timespec='seconds'))}</dd>"
        "</dl>"
        '<div class="controls">'
        f'<form method="post" action="{_e(action_url)}" class="answer">{hidden}{answer}</form>'
        f'<form method="post" action="{_e(action_url)}" class="reject">{_hidden(request, csrf, "reject")}'
        "<b>Decline</b>"
        '<p><textarea name="reason" rows="3" required placeholder="why (the agent sees this)"></textarea></p>'
        '<button class="reject">Decline</button></form>'
        "</div></section>"
    )


def respond_form(action_url: str, request: ApprovalRequest, csrf: str) -> str:
    """The form that answers a proposed action with a message instead of running it."""
    return (
        f'<form method="post" action="{_e(action_url)}" class="respond">{_hidden(request, csrf, "respond")}'
        "<b>Respond instead of running it</b>"
        '<p><textarea name="reason" rows="3" required placeholder="the agent reads this as the result">'
        "</textarea></p>"
        "<button>Respond</button></form>"
    )


__all__ = ["question_html", "respond_form"]
