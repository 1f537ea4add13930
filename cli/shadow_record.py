"""A closed task, read back from its workflow history as a shadow run replays it (``RecordedTask``).

Everything a shadow run needs is in the history; nothing else is read:

- the spec (agent, prompt, tenant, labels, policy, sandbox, budgets) is the run's input;
- the inputs the agent saw (artifact references) are in the first ``agent.turn``'s input;
- each proposed action (tool, arguments, operation, version) is in the result of the turn that
  proposed it, and the result it received (approval outcome, write receipt, command output) in the
  input of the next turn (``TurnInput.results``), under the same call id;
- the final answer, phase and usage (cost, model calls, active seconds) are in the run's result;
  a run that failed or was terminated has its phase from the closing event, and its usage summed
  from its turns.

Works on histories from the cluster and on exported JSON files alike (``temporal workflow show -o
json``, ``tests/histories``). A task that continued as new is read from the run given: actions of
earlier runs are not in it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_worker.schemas.actions import ActionResult, ProposedAction
from agent_worker.schemas.artifacts import ArtifactRef
from agent_worker.schemas.shadow import RecordedAction, RecordedTask
from agent_worker.schemas.validation import InvalidPayload, parse_task_input
from agent_worker.schemas.visibility import WORKFLOW_TYPE
from pydantic import ValidationError

if TYPE_CHECKING:
    from temporalio.api.common.v1 import Payload
    from temporalio.client import WorkflowHistory
    from temporalio.converter import DataConverter

TURN_ACTIVITY = "agent.turn"
_CLOSED = {
    "workflow_execution_completed_event_attributes": "completed",
    "workflow_execution_failed_event_attributes": "failed",
    "workflow_execution_terminated_event_attributes": "terminated",
    "workflow_execution_canceled_event_attributes": "cancelled",
    "workflow_execution_timed_out_event_attributes": "timed_out",
    "workflow_execution_continued_as_new_event_attributes": "continued_as_new",
}

__all__ = ["NotRecordable", "read_recorded_task"]


class NotRecordable(Exception):
    """The history is not a closed task a shadow run can replay (the message says why)."""


async def read_recorded_task(history: WorkflowHistory, converter: DataConverter) -> RecordedTask:
    """The recorded task in ``history`` (see the module docstring).

    Raises:
        NotRecordable: not a task, still open, its input was refused, or a payload cannot be read.
    """
    events = list(history.events)
    if not events or not events[0].HasField("workflow_execution_started_event_attributes"):
        raise NotRecordable("no start event")
    started = events[0].workflow_execution_started_event_attributes
    if started.workflow_type.name != WORKFLOW_TYPE:
        raise NotRecordable(f"not a task ({started.workflow_type.name})")
    closing = next((k for k in _CLOSED if events[-1].HasField(k)), None)
    if closing is None:
        raise NotRecordable("the task is still open")
    if not started.input.payloads:
        raise NotRecordable("the run has no input")
    try:
        spec = parse_task_input(await _decode(started.input.payloads[0], converter)).spec
    except InvalidPayload as err:
        raise NotRecordable(f"its input was refused at start ({err})") from None
    task = RecordedTask(
        task_id=history.workflow_id,
        run_id=events[0].workflow_execution_started_event_attributes.original_execution_run_id,
        agent=spec.agent,
        prompt=spec.prompt,
        tenant=spec.tenant,
        labels=spec.labels,
        policy=spec.policy,
        max_turns=spec.budgets.max_turns,
        sandbox=spec.sandbox,
        phase=_CLOSED[closing],
        wall_seconds=round(
            events[-1].event_time.ToDatetime().timestamp() - events[0].event_time.ToDatetime().timestamp(), 3
        ),
    )
    await _read_turns(events, converter, task)
    if closing == "workflow_execution_completed_event_attributes":
        payloads = events[-1].workflow_execution_completed_event_attributes.result.payloads
        if payloads:
            _read_result(await _decode(payloads[0], converter), task)
    return task


async def _read_turns(events: list[Any], converter: DataConverter, task: RecordedTask) -> None:
    turns: set[int] = set()
    waiting: dict[str, RecordedAction] = {}
    first = True
    for event in events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name != TURN_ACTIVITY or not attrs.input.payloads:
                continue
            turns.add(event.event_id)
            turn_input = await _decode(attrs.input.payloads[0], converter)
            if not isinstance(turn_input, dict):
                continue
            if first:
                inputs = turn_input.get("inputs") or []
                task.inputs = [_model(ArtifactRef, i, "a turn's input") for i in inputs]
                first = False
            for raw in turn_input.get("results") or []:
                recorded = waiting.pop(str(raw.get("call_id")), None) if isinstance(raw, dict) else None
                if recorded is not None:
                    recorded.result = _model(ActionResult, raw, "a turn's result")
        elif event.HasField("activity_task_completed_event_attributes"):
            attrs = event.activity_task_completed_event_attributes
            if attrs.scheduled_event_id not in turns or not attrs.result.payloads:
                continue
            result = await _decode(attrs.result.payloads[0], converter)
            if not isinstance(result, dict):
                continue
            usage = result.get("usage") or {}
            task.model_calls += int(usage.get("model_calls") or 0)
            task.input_tokens += int(usage.get("input_tokens") or 0)
            task.output_tokens += int(usage.get("output_tokens") or 0)
            task.cost_usd += float(usage.get("cost_usd") or 0.0)
            for raw in result.get("proposed") or []:
                action = _model(ProposedAction, raw, "a proposed action")
                recorded = RecordedAction(
                    **action.model_dump(
                        include={"tool", "effect", "arguments", "operation", "version", "turn"}
                    )
                )
                task.actions.append(recorded)
                waiting[action.call_id] = recorded
            if result.get("status") == "final":
                task.final_output = result.get("final_output")


def _read_result(result: Any, task: RecordedTask) -> None:
    """The task's own result: its phase, final answer and usage override what the turns said."""
    if not isinstance(result, dict):
        return
    task.phase = str(result.get("phase") or task.phase)
    task.final_output = result.get("final_output", task.final_output)
    usage = result.get("usage") or {}
    if usage:
        task.cost_usd = float(usage.get("cost_usd") or task.cost_usd)
        task.model_calls = int(usage.get("model_calls") or task.model_calls)
        task.input_tokens = int(usage.get("input_tokens") or task.input_tokens)
        task.output_tokens = int(usage.get("output_tokens") or task.output_tokens)
        task.active_seconds = float(usage.get("active_seconds") or 0.0)


def _model(cls: Any, raw: Any, what: str) -> Any:
    try:
        return cls.model_validate(raw)
    except ValidationError as err:
        raise NotRecordable(f"{what} cannot be read: {err.errors()[0].get('msg')}") from None


async def _decode(payload: Payload, converter: DataConverter) -> Any:
    try:
        [value] = await converter.decode([payload])
    except Exception as err:  # a codec without the key, a payload no converter reads
        raise NotRecordable(f"a payload cannot be decoded ({type(err).__name__}: {err})") from None
    return value
