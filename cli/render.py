"""Readable text for people, for every command: task status, approval requests, the inbox table,
progress and event lines, evidence."""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent_worker.schemas.approvals import ApprovalRequest
    from agent_worker.schemas.events import Event
    from agent_worker.schemas.tasks import Evidence, TaskResult, TaskStatus

    from agent_worker.client import AwaitingTask


def _short(text: str, width: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def approve_commands(task_id: str, request: ApprovalRequest, principal: str | None = None) -> list[str]:
    """The commands a human types to approve ``request``: ours, and the official Temporal CLI's."""
    who = principal or request.approvers[0]
    decision = {
        "request_id": request.request_id,
        "version": request.version,
        "decision": "approve",
        "principal": who,
    }
    return [
        f"agent-worker approve {shlex.quote(task_id)} --request {request.request_id} "
        f"--version {request.version} --as {shlex.quote(who)}",
        f"temporal workflow signal --workflow-id {shlex.quote(task_id)} --name submit_decision "
        f"--input {shlex.quote(json.dumps(decision, separators=(',', ':')))}",
    ]


def request_lines(task_id: str, request: ApprovalRequest) -> list[str]:
    """A pending request, with what it would do and how to decide it."""
    action = request.action
    lines = [
        f"  {request.request_id}: {action.tool} ({action.effect.value}) "
        f"needs {' or '.join(request.approvers)}",
        f"    why:      {request.reason or '-'}",
        *([f"    quorum:   {request.progress}"] if request.quorum else []),
        f"    version:  {request.version}",
        f"    deadline: {request.deadline.isoformat()}",
        f"    args:     {_short(json.dumps(action.arguments, sort_keys=True), 200)}",
    ]
    question = getattr(action.operation, "question", None)
    if question is not None and action.operation.kind == "human.ask":
        return lines[:4] + question_lines(task_id, request)
    lines += ["    approve with:"] + [f"      {c}" for c in approve_commands(task_id, request)]
    return lines


def question_lines(task_id: str, request: ApprovalRequest) -> list[str]:
    """A question the agent asked (``ask_human``): what it asks, what answer it takes, and the
    command that answers it."""
    question = request.action.operation
    kind = question.answer_type.value
    lines = [f"    question: {_short(question.question, 300)}", f"    answer:   {kind}"]
    example = "TEXT"
    if question.options:
        lines.append(f"    options:  {', '.join(question.options)}")
        example = question.options[0]
    if question.form is not None:
        lines.append(f"    form:     {_short(json.dumps(question.form, sort_keys=True), 300)}")
    who = request.approvers[0]
    answer = "--json '{...}'" if question.form is not None else shlex.quote(example)
    lines += [
        "    answer with:",
        f"      agent-worker answer {shlex.quote(task_id)} --request {request.request_id} "
        f"--version {request.version} --as {shlex.quote(who)} {answer}",
    ]
    return lines


def status_text(status: TaskStatus) -> str:
    """The ``status`` query's answer, for people."""
    u, b = status.usage, status.budgets
    lines = [
        f"task {status.task_id}  agent={status.agent}  tenant={status.tenant}",
        f"  phase:  {status.phase.value}" + (f"  ({status.reason})" if status.reason else ""),
        f"  usage:  turns {u.turns}/{b.max_turns}, actions {u.actions}/{b.max_actions}, "
        f"sandbox {u.sandbox_seconds:.1f}/{b.max_sandbox_seconds:g} s, model calls {u.model_calls}, "
        f"tokens {u.input_tokens}+{u.output_tokens}",
    ]
    if status.final_output:
        lines.append(f"  output: {_short(status.final_output, 200)}")
    if status.pending:
        lines.append("pending approvals:")
        for request in status.pending:
            lines += request_lines(status.task_id, request)
    if status.ignored:
        lines.append("ignored decisions:")
        lines += [
            f"  {i.received_at:%H:%M:%S} {i.principal or '?'} via {i.via}: {i.reason}" for i in status.ignored
        ]
    if status.last_events:
        lines.append("recent events:")
        lines += [
            f"  {e.seq:>4} {e.at:%H:%M:%S} {e.type.value:<20} {_short(event_summary(e.data), 80)}"
            for e in status.last_events
        ]
    return "\n".join(lines)


def event_summary(data: dict[str, Any]) -> str:
    """An event's data on one line: ``key=value`` for each field that says something."""
    return " ".join(f"{k}={v}" for k, v in data.items() if v not in (None, [], ""))


_event_summary = event_summary


def progress_line(event: Event) -> str:
    """One line of a task's progress, as ``start --wait`` and ``demo`` follow it."""
    return f"  {event.at:%H:%M:%S} {event.type.value:<18} {event_summary(event.data)[:110]}"


TIMELINE_HEADER = f"{'seq':>5}  {'time (UTC)':<19}  {'event':<22} {'phase':<18} details"


def timeline_line(event: Event) -> str:
    """One row of ``agent-worker events`` (under ``TIMELINE_HEADER``)."""
    summary = event_summary(event.data)[:120]
    return f"{event.seq:>5}  {event.at:%Y-%m-%d %H:%M:%S}  {event.type.value:<22} {event.phase:<18} {summary}"


def awaiting_lines(entry: AwaitingTask) -> list[str]:
    """One task of ``agent-worker inbox``: its requests, or what visibility knows when its worker
    did not answer."""
    lines = [f"task {entry.task_id}  agent={entry.agent}  tenant={entry.tenant}"]
    if entry.error is not None:
        lines.append(f"  approvers: {', '.join(entry.approvers)}; details unavailable: {entry.error}")
    for request in entry.requests:
        lines += request_lines(entry.task_id, request)
    return lines


def evidence_text(evidence: Evidence) -> str:
    """The evidence of a finished task, for people."""
    lines = ["evidence:", "  inputs:"]
    lines += [f"    {a.name:<24} {a.size:>7} B  {a.digest}" for a in evidence.inputs]
    lines.append("  artifacts:")
    lines += [f"    {a.name:<24} {a.size:>7} B  {a.digest}" for a in evidence.artifacts] or ["    (none)"]
    lines.append("  sandbox commands:")
    lines += [
        f"    {c.call_id}: exit {c.exit_code} in {c.duration_ms} ms, stdout {c.stdout_artifact.digest}"
        for c in evidence.commands
    ] or ["    (none)"]
    lines.append("  approvals:")
    lines += [
        f"    {d.request_id}: {d.decision.value} by {d.principal} at {d.decided_at.isoformat()} "
        f"(version {d.version[:19]}...)"
        + (f" via grant {d.grant_id}" if d.grant_id else "")
        + (f", remembered as {d.remembered_as}" if d.remembered_as else "")
        for d in evidence.approvals
    ] or ["    (none)"]
    lines.append("  writes:")
    lines += [
        f"    {w.operation_key}: {w.receipt.outcome.value} as {w.receipt.record_id}, "
        f"confirmed by lookup: {'yes' if w.confirmed else 'UNKNOWN' if w.confirmed is None else 'NO'}"
        for w in evidence.writes
    ] or ["    (none)"]
    if evidence.missing:
        lines.append("  MISSING:")
        lines += [f"    {m}" for m in evidence.missing]
    return "\n".join(lines)


def result_text(result: TaskResult) -> str:
    """A finished task's outcome and evidence, for people."""
    head = f"task {result.task_id} ended {result.phase.value}"
    if result.reason:
        head += f": {result.reason}"
    lines = [head]
    if result.final_output:
        lines.append(f"agent: {result.final_output}")
    return "\n".join([*lines, evidence_text(result.evidence)])
