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

A task that continued as new is read from all its runs, oldest first (``activities.task_history``'s
``chain_of`` puts them together from the cluster, ``chains_in`` from exported files): the spec from
the first run's input, the inputs from the chain's first turn, the actions from every run (an action
proposed in one run gets the result a later run's turn received), the phase, answer and usage from
the newest run, which closed the task, and the wall time from the first run's start to that close.
A run that closed by continuing as new is not a task of its own: its newest run stands for it.

Works on histories from the cluster and on exported JSON files alike (``temporal workflow show -o
json``, ``tests/histories``). A chain whose earlier runs are not among the files is read from the
runs that are: the actions of the absent runs are not in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agent_worker.activities.task_history import turn_payloads
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

_CLOSED = {
    "workflow_execution_completed_event_attributes": "completed",
    "workflow_execution_failed_event_attributes": "failed",
    "workflow_execution_terminated_event_attributes": "terminated",
    "workflow_execution_canceled_event_attributes": "cancelled",
    "workflow_execution_timed_out_event_attributes": "timed_out",
    "workflow_execution_continued_as_new_event_attributes": "continued_as_new",
}
_CONTINUED = "workflow_execution_continued_as_new_event_attributes"
_STARTED = "workflow_execution_started_event_attributes"

__all__ = ["NotRecordable", "read_recorded_task"]


class NotRecordable(Exception):
    """The history is not a closed task a shadow run can replay (the message says why)."""


async def read_recorded_task(
    runs: WorkflowHistory | Sequence[WorkflowHistory], converter: DataConverter
) -> RecordedTask:
    """The recorded task in ``runs``: one run's history, or the runs of one chain oldest first (see
    the module docstring).

    Raises:
        NotRecordable: not a task, still open, continued as new (its newer run stands for it), its
            input was refused, or a payload cannot be read.
    """
    chain = list(runs) if isinstance(runs, Sequence) else [runs]
    if not chain:
        raise NotRecordable("no history")
    if not all(h.events and h.events[0].HasField(_STARTED) for h in chain):
        raise NotRecordable("no start event")
    first, last = chain[0].events, chain[-1].events
    started = first[0].workflow_execution_started_event_attributes
    if started.workflow_type.name != WORKFLOW_TYPE:
        raise NotRecordable(f"not a task ({started.workflow_type.name})")
    closing = next((k for k in _CLOSED if last[-1].HasField(k)), None)
    if closing is None:
        raise NotRecordable("the task is still open")
    if closing == _CONTINUED:
        raise NotRecordable("the run continued as new: the task is read from its newest run")
    if not started.input.payloads:
        raise NotRecordable("the run has no input")
    try:
        spec = parse_task_input(await _decode(started.input.payloads[0], converter)).spec
    except InvalidPayload as err:
        raise NotRecordable(f"its input was refused at start ({err})") from None
    task = RecordedTask(
        task_id=chain[-1].workflow_id,
        run_id=started.original_execution_run_id,
        agent=spec.agent,
        prompt=spec.prompt,
        tenant=spec.tenant,
        labels=spec.labels,
        policy=spec.policy,
        max_turns=spec.budgets.max_turns,
        sandbox=spec.sandbox,
        phase=_CLOSED[closing],
        wall_seconds=round(
            last[-1].event_time.ToDatetime().timestamp() - first[0].event_time.ToDatetime().timestamp(), 3
        ),
    )
    await _read_turns(chain, converter, task)
    if closing == "workflow_execution_completed_event_attributes":
        payloads = last[-1].workflow_execution_completed_event_attributes.result.payloads
        if payloads:
            _read_result(await _decode(payloads[0], converter), task)
    return task


async def _read_turns(chain: list[WorkflowHistory], converter: DataConverter, task: RecordedTask) -> None:
    """Every run's turns in order. An action waits for its result under its call id across runs (a
    task continues as new before it waits for a person, so the decision is in a later run)."""
    waiting: dict[str, RecordedAction] = {}
    first = True
    for history in chain:
        for is_result, payload in turn_payloads(history.events):
            decoded = await _decode(payload, converter)
            if is_result:
                _read_turn_result(decoded, task, waiting)
                continue
            if not isinstance(decoded, dict):
                continue
            if first:
                inputs = decoded.get("inputs") or []
                task.inputs = [_model(ArtifactRef, i, "a turn's input") for i in inputs]
                first = False
            for raw in decoded.get("results") or []:
                recorded = waiting.pop(str(raw.get("call_id")), None) if isinstance(raw, dict) else None
                if recorded is not None:
                    recorded.result = _model(ActionResult, raw, "a turn's result")


def _read_turn_result(result: Any, task: RecordedTask, waiting: dict[str, RecordedAction]) -> None:
    if not isinstance(result, dict):
        return
    usage = result.get("usage") or {}
    task.model_calls += int(usage.get("model_calls") or 0)
    task.input_tokens += int(usage.get("input_tokens") or 0)
    task.output_tokens += int(usage.get("output_tokens") or 0)
    task.cost_usd += float(usage.get("cost_usd") or 0.0)
    for raw in result.get("proposed") or []:
        action = _model(ProposedAction, raw, "a proposed action")
        recorded = RecordedAction(
            **action.model_dump(include={"tool", "effect", "arguments", "operation", "version", "turn"})
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
