"""The actions a task proposed, read back from its recorded workflow history.

``agent-worker policy simulate`` runs a candidate policy over what real tasks proposed. Everything
the policy looked at is in the history, so nothing else is read (no artifact store, no model, no
worker):

- the task's spec (its policy, agent, tenant and labels) is the run's input, in its first event
  (``{"spec": ...}`` or a bare spec: ``schemas.validation.parse_task_input``, as the workflow reads it);
- each proposed action (tool, arguments, effect class, the SDK agent that called it) is in the result
  of the ``agent.turn`` activity that proposed it (``TurnResult.proposed``);
- what became of it (executed, edited, rejected, denied, expired, ...) is in the input of the next
  ``agent.turn`` (``TurnInput.results``), which tells the model. An action whose outcome is not in
  the runs read (the task still waits, or ended first) is ``undecided``.

A task that continued as new is read from all its runs, oldest first (``activities.task_history``'s
``chain_of`` puts them together from the cluster, ``chains_in`` from files): a task continues as new
just before it waits for a person, so an action proposed in one run gets its outcome from the next
turn, in a later run. The chain is one ``RecordedRun``, named by its first run. Files missing the
chain's earlier runs are read from the runs there (without the absent runs' actions); a run whose
later runs are absent is read as an open one is (its last actions ``undecided``).

Payloads are decoded with the data converter the workers use, so an encrypted history needs its keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent_worker.activities.task_history import TURN, run_id_of, turn_payloads
from agent_worker.schemas.actions import ProposedAction
from agent_worker.schemas.tasks import TaskSpec
from agent_worker.schemas.validation import InvalidPayload, describe, parse_task_input
from agent_worker.schemas.visibility import WORKFLOW_TYPE
from pydantic import ValidationError

if TYPE_CHECKING:
    from temporalio.api.common.v1 import Payload
    from temporalio.api.history.v1 import HistoryEvent
    from temporalio.client import WorkflowHistory
    from temporalio.converter import DataConverter

TASK_WORKFLOW = WORKFLOW_TYPE  # the workflow type of a task
UNDECIDED = "undecided"

__all__ = ["TASK_WORKFLOW", "UNDECIDED", "RecordedAction", "RecordedRun", "events_read", "read_run"]


@dataclass
class RecordedAction:
    """One action a task proposed, and what became of it in the run."""

    turn: int
    action: ProposedAction
    outcome: str = UNDECIDED  # an ``ActionStatus`` value, or ``UNDECIDED``


@dataclass
class RecordedRun:
    """One task (all the runs of its chain read, named by the first): its spec and the actions it
    proposed, in order; or why it was not read."""

    workflow_id: str
    run_id: str
    workflow_type: str
    spec: TaskSpec | None = None
    actions: list[RecordedAction] = field(default_factory=list)
    skipped: str | None = None  # why the run was not read (not a task, input refused, ...)


async def read_run(
    runs: WorkflowHistory | Sequence[WorkflowHistory], converter: DataConverter
) -> RecordedRun:
    """The spec and proposed actions recorded in ``runs``: one run's history, or the runs of one
    chain oldest first (see the module docstring).

    A run that is no task, whose input was refused at start, or whose payloads cannot be decoded is
    returned with ``skipped`` saying why, never raised: one unreadable history does not stop a
    simulation over many.
    """
    chain = list(runs) if isinstance(runs, Sequence) else [runs]
    first = list(chain[0].events)
    run = RecordedRun(chain[-1].workflow_id, run_id_of(chain[0]), _workflow_type(first))
    if run.workflow_type != TASK_WORKFLOW:
        run.skipped = f"not a task ({run.workflow_type or 'no start event'})"
        return run
    try:
        run.spec = await _spec(first[0], converter)
        waiting: dict[str, RecordedAction] = {}  # call id -> the latest action still without an outcome
        for history in chain:
            await _collect(list(history.events), converter, run, waiting)
    except _Unreadable as err:
        run.skipped = str(err)
        run.actions.clear()
    return run


def events_read(history: dict[str, Any]) -> dict[str, Any]:
    """``history`` as JSON (``temporal workflow show -o json``) cut to the events ``read_run`` reads:
    the first, and the scheduling and completion of each ``agent.turn``. Turning a JSON history into
    protobuf is most of the cost of reading a file, and most events are not read.
    """
    events = history.get("events")
    if not isinstance(events, list) or not events:
        return history
    turns = {
        str(e.get("eventId"))
        for e in events
        if isinstance(e, dict)
        and (e.get("activityTaskScheduledEventAttributes") or {}).get("activityType", {}).get("name") == TURN
    }
    kept = [events[0]] + [
        e
        for e in events[1:]
        if isinstance(e, dict)
        and (
            str(e.get("eventId")) in turns
            or str((e.get("activityTaskCompletedEventAttributes") or {}).get("scheduledEventId")) in turns
        )
    ]
    return {**history, "events": kept}


class _Unreadable(Exception):
    """The history holds something this code cannot read (the message says what)."""


async def _spec(first: HistoryEvent, converter: DataConverter) -> TaskSpec:
    payloads = list(first.workflow_execution_started_event_attributes.input.payloads)
    if not payloads:
        raise _Unreadable("the run has no input")
    raw = await _decode(payloads[0], converter, "the task input")
    try:
        return parse_task_input(raw).spec
    except InvalidPayload as err:
        raise _Unreadable(f"its input was refused at start ({err})") from None


async def _collect(
    events: list[HistoryEvent], converter: DataConverter, run: RecordedRun, waiting: dict[str, RecordedAction]
) -> None:
    """Walk one run's history in order: turn inputs settle earlier actions (of this run or an earlier
    one: ``waiting``), turn results add new ones."""
    for is_result, payload in turn_payloads(events):
        if is_result:
            _propose(await _decode(payload, converter, "a turn's result"), run, waiting)
        else:
            _settle(await _decode(payload, converter, "a turn's input"), waiting)


def _propose(result: Any, run: RecordedRun, waiting: dict[str, RecordedAction]) -> None:
    if not isinstance(result, dict):
        raise _Unreadable("a turn's result is not a JSON object")
    turn = result.get("turn") if isinstance(result.get("turn"), int) else 0
    for index, raw in enumerate(result.get("proposed") or []):
        try:
            action = ProposedAction.model_validate(raw)
        except ValidationError as err:
            raise _Unreadable(f"turn {turn}: proposed action {index}: {describe(err)}") from None
        recorded = RecordedAction(turn=turn, action=action)
        run.actions.append(recorded)
        waiting[action.call_id] = recorded


def _settle(turn_input: Any, waiting: dict[str, RecordedAction]) -> None:
    if not isinstance(turn_input, dict):
        return
    for result in turn_input.get("results") or []:
        if isinstance(result, dict) and (recorded := waiting.pop(str(result.get("call_id")), None)):
            recorded.outcome = str(result.get("status") or UNDECIDED)


async def _decode(payload: Payload, converter: DataConverter, what: str) -> Any:
    try:
        [value] = await converter.decode([payload])
    except Exception as err:  # a codec without the key, a payload no converter reads
        raise _Unreadable(f"{what} cannot be decoded ({type(err).__name__}: {err})") from None
    return value


def _workflow_type(events: list[HistoryEvent]) -> str:
    if events and events[0].HasField("workflow_execution_started_event_attributes"):
        return events[0].workflow_execution_started_event_attributes.workflow_type.name
    return ""
