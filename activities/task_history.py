"""Reading a task's steps from its Temporal history, and starting a fork of it (docs/forks.md).

The client (``AgentWorkerClient.steps`` / ``fork``), the CLI, the API and the worker's
``fork.prepare`` all read a task the same way: every run of its chain (continue-as-new followed
back to the first run), each ``agent.turn``'s input and result, each command's record
(``sandbox.exec`` and its local twin ``sandbox.exec_here``) and each business write's input and
receipt, each placed after the turn that proposed it; a fork's ``fork.prepare`` answer adds its
ancestors' committed writes, so a fork of a fork does not repeat them either. The same reading
serves an exported history file (``read_exported``: ``agent-worker fork --history``). The chain
is put together by ``chain_of`` (from the cluster) and ``chains_in`` (from exported runs), which the
CLI's other readers of whole tasks share (``agent-worker shadow``, ``policy simulate``). Light:
Temporal's client and the payload models only (``tests/test_light_client.py``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.client import Client, WorkflowHistory
from temporalio.converter import DataConverter

if TYPE_CHECKING:
    from agent_worker.schemas.forks import StepRecord
    from temporalio.api.common.v1 import Payload
    from temporalio.api.history.v1 import HistoryEvent

# Runs of one chain followed back (continue-as-new); a longer chain is read from its newest runs.
MAX_RUNS = 100
LOCAL_ACTIVITY_MARKER = "core_local_activity"
FORK_ID_INFIX = ".fork-"
TURN, EXEC, EXEC_HERE, WRITE = "agent.turn", "sandbox.exec", "sandbox.exec_here", "business.write"
LOOKUP, PREPARE = "business.lookup", "fork.prepare"


class ForkRefused(ValueError):
    """The fork cannot be made as asked (no such task, no such step); the message says why."""


@dataclass
class TurnRecord:
    """One turn of the task: its input and (once finished) its result, as JSON."""

    input: dict[str, Any]
    result: dict[str, Any] | None = None
    run_id: str = ""


@dataclass
class TaskHistory:
    """What a task's histories say, oldest first."""

    task_id: str
    start_input: Any = None
    run_chain: str | None = None
    task_queue: str | None = None
    turns: dict[int, TurnRecord] = field(default_factory=dict)
    # (turn after which it ran, CommandRecord JSON)
    commands: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    # (turn after which it ran, WriteInput JSON, WriteReceipt JSON): committed by the write's own
    # answer, or found by a lookup after its answer was lost
    writes: list[tuple[int, dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    # Every write sent, by operation key (a lookup's receipt is matched to its write here).
    sent: dict[str, dict[str, Any]] = field(default_factory=dict)
    # A fork's ancestors' committed writes, as its ``fork.prepare`` took them (``ParentWrite`` JSON).
    inherited: list[dict[str, Any]] = field(default_factory=list)
    # Read from exported runs whose first continued from a run not among them: earlier steps are missing.
    partial: bool = False

    def spec(self) -> dict[str, Any]:
        """The task's spec as it was started (a bare spec or ``{"spec": ...}``)."""
        value = self.start_input
        if isinstance(value, dict) and isinstance(value.get("spec"), dict):
            return dict(value["spec"])
        if isinstance(value, dict):
            return dict(value)
        raise ForkRefused(f"task {self.task_id}: its start input is not a task spec")


async def read_history(client: Client, task_id: str) -> TaskHistory:
    """Every run of ``task_id``'s chain, read into one ``TaskHistory``.

    Raises:
        ForkRefused: no task with that id.
    """
    from temporalio.service import RPCError, RPCStatusCode

    try:
        histories = await chain_of(client, await client.get_workflow_handle(task_id).fetch_history())
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:
            raise ForkRefused(f"no task {task_id!r}") from None
        raise
    return await read_histories(task_id, histories, client.data_converter)


async def chain_of(client: Client, history: WorkflowHistory) -> list[WorkflowHistory]:
    """``history`` and the runs it continued from (continue-as-new followed back, ``MAX_RUNS`` in
    all at most), oldest first: the whole chain when ``history`` is its newest run."""
    chain = [history]
    while len(chain) < MAX_RUNS and (previous := continued_from(chain[-1])) is not None:
        handle = client.get_workflow_handle(history.workflow_id, run_id=previous)
        chain.append(await handle.fetch_history())
    return chain[::-1]


def turn_payloads(events: Iterable[HistoryEvent]) -> Iterator[tuple[bool, Payload]]:
    """One run's ``agent.turn`` payloads in history order, still encoded: ``(False, input)`` as a
    turn is scheduled and ``(True, result)`` as it completes. Event ids begin again at 1 in every
    run, so give the runs of a chain one at a time."""
    turns: set[int] = set()
    for event in events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == TURN:
                turns.add(event.event_id)
                if attrs.input.payloads:
                    yield False, attrs.input.payloads[0]
        elif event.HasField("activity_task_completed_event_attributes"):
            attrs = event.activity_task_completed_event_attributes
            if attrs.scheduled_event_id in turns and attrs.result.payloads:
                yield True, attrs.result.payloads[0]


def chains_in(histories: Iterable[WorkflowHistory]) -> list[list[WorkflowHistory]]:
    """The runs among ``histories`` (exported files, one run each) put together into chains, each
    oldest first: runs of one workflow id, linked by the run each continued from. A run given twice
    is taken once; a chain whose earlier runs are not among them begins at its earliest run that is.
    Chains come in the order their newest runs were given.
    """
    runs: dict[tuple[str, str], WorkflowHistory] = {}
    for index, history in enumerate(histories):
        # A history without its start (no run id) is a chain of its own, for its reader to refuse.
        runs.setdefault((history.workflow_id, run_id_of(history) or f"#{index}"), history)
    continued = {(w, p) for (w, _), h in runs.items() if (p := continued_from(h)) is not None}
    chains = []
    for (workflow_id, run_id), history in runs.items():
        if (workflow_id, run_id) in continued:
            continue  # a later run of its chain is here: the chain is read from that one
        chain = [history]
        while len(chain) < MAX_RUNS and (previous := continued_from(chain[-1])) is not None:
            if (earlier := runs.get((workflow_id, previous))) is None:
                break
            chain.append(earlier)
        chains.append(chain[::-1])
    return chains


def continued_from(history: WorkflowHistory) -> str | None:
    """The run ``history``'s run continued from (continue-as-new), or None: it is its chain's first."""
    if not history.events or not history.events[0].HasField("workflow_execution_started_event_attributes"):
        return None
    return history.events[0].workflow_execution_started_event_attributes.continued_execution_run_id or None


def run_id_of(history: WorkflowHistory) -> str:
    """The run id ``history``'s start event names, or "" for a history without its start."""
    if not history.events or not history.events[0].HasField("workflow_execution_started_event_attributes"):
        return ""
    return history.events[0].workflow_execution_started_event_attributes.original_execution_run_id


# A task that waited for a person ran in two runs or more (continue-as-new), and an export holds one
# run: the runs of one task exported file by file are kept together under this key.
RUNS = "runs"


def load_exported(
    path: str | Path | dict[str, Any] | Sequence[str | Path | dict[str, Any]],
) -> dict[str, Any]:
    """An exported history file's JSON (a dict is taken as already read); several files (the runs of
    one task, in any order) as ``{"runs": [...]}``, which ``read_exported`` puts together.

    Raises:
        ForkRefused: one cannot be read or is not a JSON object, naming the file.
    """
    if isinstance(path, dict):
        return path
    if not isinstance(path, str | Path):
        runs = [load_exported(one) for one in path]
        if not runs:
            raise ForkRefused("no exported history given")
        return runs[0] if len(runs) == 1 else {RUNS: runs}
    try:
        value = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise ForkRefused(f"{path}: {err}") from None
    if not isinstance(value, dict):
        raise ForkRefused(f"{path}: not an exported history (a JSON object with its events)")
    return value


def parse_exported(task_id: str, exported: str | dict[str, Any]) -> WorkflowHistory:
    """An exported history (``temporal workflow show -o json``, the Temporal UI's download, or
    ``WorkflowHistory.to_json``; as ``tests/histories`` hold them) as the SDK reads it.

    Raises:
        ForkRefused: it is not such a history, or does not begin with the task's start.
    """
    try:
        history = WorkflowHistory.from_json(task_id, exported)
    except Exception as err:  # the protobuf JSON parser raises its own errors, and KeyError/TypeError
        raise ForkRefused(f"not an exported Temporal history: {err}") from None
    if not history.events or not history.events[0].HasField("workflow_execution_started_event_attributes"):
        raise ForkRefused("the exported history does not begin with its workflow's start")
    return history


async def read_exported(
    task_id: str, exported: str | dict[str, Any], converter: DataConverter
) -> TaskHistory:
    """An exported history of one run (``parse_exported``), or the runs of one task
    (``load_exported``'s ``{"runs": [...]}``) put together into their chain, read as ``read_history``
    reads the cluster's; ``converter`` decodes its payloads (the workers', with their codec).

    Raises:
        ForkRefused: not an exported history, or runs of more than one chain.
    """
    if isinstance(exported, dict) and RUNS in exported:
        runs = exported[RUNS]
        if not isinstance(runs, list) or not runs:
            raise ForkRefused(f"not exported histories: {RUNS!r} must list the runs")
        chains = chains_in(parse_exported(task_id, run) for run in runs)
        if len(chains) != 1:
            raise ForkRefused(
                f"the {len(runs)} exported histories are runs of {len(chains)} chains, not of one task "
                "(or a run between them is missing): give every run of one task"
            )
        [chain] = chains
    else:
        chain = [parse_exported(task_id, exported)]
    read = await read_histories(task_id, chain, converter)
    read.partial = continued_from(chain[0]) is not None
    return read


async def read_histories(
    task_id: str, histories: list[WorkflowHistory], converter: DataConverter
) -> TaskHistory:
    """The runs of one chain, oldest first, read into one ``TaskHistory``."""
    read = TaskHistory(task_id)
    turn = 0
    for history in histories:
        scheduled: dict[int, tuple[str, Any]] = {}
        for event in history.events:
            if event.HasField("workflow_execution_started_event_attributes"):
                attrs = event.workflow_execution_started_event_attributes
                if read.start_input is None:
                    [read.start_input] = await converter.decode(list(attrs.input.payloads)) or [None]
                    read.run_chain = attrs.first_execution_run_id or history.run_id
                    read.task_queue = attrs.task_queue.name or None
            elif event.HasField("activity_task_scheduled_event_attributes"):
                attrs = event.activity_task_scheduled_event_attributes
                name = attrs.activity_type.name
                if name in (TURN, EXEC, WRITE, LOOKUP, PREPARE):
                    [value] = await converter.decode(list(attrs.input.payloads))
                    scheduled[event.event_id] = (name, value)
                    if name == TURN:
                        turn = int(value["turn"])
                        read.turns[turn] = TurnRecord(input=value, run_id=history.run_id)
                    elif name == WRITE:
                        read.sent[str(value["operation_key"])] = value
            elif event.HasField("activity_task_completed_event_attributes"):
                attrs = event.activity_task_completed_event_attributes
                if attrs.scheduled_event_id in scheduled:
                    name, value = scheduled[attrs.scheduled_event_id]
                    [result] = await converter.decode(list(attrs.result.payloads))
                    _completed(read, turn, name, value, result)
            elif event.HasField("marker_recorded_event_attributes"):
                attrs = event.marker_recorded_event_attributes
                if attrs.marker_name != LOCAL_ACTIVITY_MARKER or "result" not in attrs.details:
                    continue
                data = json.loads(attrs.details["data"].payloads[0].data)
                if data.get("activity_type") == EXEC_HERE:
                    [result] = await converter.decode(list(attrs.details["result"].payloads))
                    if result is not None:
                        read.commands.append((turn, result))
    return read


def _completed(read: TaskHistory, turn: int, name: str, value: Any, result: Any) -> None:
    if name == TURN:
        read.turns[int(value["turn"])].result = result
    elif name == EXEC:
        read.commands.append((turn, result))
    elif name == WRITE:
        read.writes.append((turn, value, result))
    elif name == PREPARE and isinstance(result, dict):
        # A fork: its ancestors' committed writes (answered from their receipts, never written
        # again) are the fork's to pass on, as its own are.
        read.inherited.extend(w for w in result.get("writes", []) if isinstance(w, dict))
    elif name == LOOKUP and isinstance(result, dict) and isinstance(result.get("receipt"), dict):
        # A write whose answer was lost, found by its lookup (a completion's lookup of a write
        # already answered adds nothing).
        key = str(value.get("operation_key"))
        known = {str(r.get("operation_key")) for _, _, r in read.writes if r.get("outcome") == "committed"}
        if key in read.sent and key not in known and result["receipt"].get("outcome") == "committed":
            read.writes.append((turn, read.sent[key], result["receipt"]))


def steps_of(read: TaskHistory) -> list[StepRecord]:
    """The task's steps (turns), each with what it proposed and what ran after it."""
    from agent_worker.schemas.forks import StepRecord

    steps = []
    for number in sorted(read.turns):
        record = read.turns[number]
        result = record.result or {}
        usage = result.get("usage") or {}
        steps.append(
            StepRecord(
                step=number,
                run_id=record.run_id,
                status=result.get("status", "failed or running") if record.result else "failed or running",
                proposed=[f"{a.get('tool')} ({a.get('call_id')})" for a in result.get("proposed", [])],
                commands=[" ".join(c.get("argv", [])) for t, c in read.commands if t == number],
                writes=[
                    f"{r.get('operation_key')} {r.get('outcome')}" for t, _, r in read.writes if t == number
                ],
                cost_usd=float(usage.get("cost_usd", 0.0)),
                model_calls=int(usage.get("model_calls", 0)),
            )
        )
    return steps


def fork_spec(
    read: TaskHistory,
    at: int,
    *,
    prompt_edit: str | None = None,
    agent_version: str | None = None,
    model: str | None = None,
    replay_until: int | None = None,
    history: str | None = None,
) -> dict[str, Any]:
    """The fork's ``TaskSpec`` (JSON): the parent's, with the change asked for and ``fork`` set;
    ``history``: the digest of the parent's exported history in the artifact store, when the fork
    reads the parent from a file rather than the cluster (``ForkSpec.history``).

    Raises:
        ForkRefused: the task has no such step, or nothing asks for a fork that could differ.
    """
    if at not in read.turns and read.partial and (not read.turns or at < min(read.turns)):
        given = f"steps {min(read.turns)} to {max(read.turns)}" if read.turns else "no step"
        raise ForkRefused(
            f"task {read.task_id}: the exported runs hold {given}, and step {at} is not among them: "
            "the first of them continued from an earlier run (the task waited, or grew long); export "
            "every run (temporal workflow show --run-id RUN -o json) and give each file"
        )
    if at not in read.turns:
        last = max(read.turns, default=0)
        raise ForkRefused(f"task {read.task_id} has steps 1 to {last}; there is no step {at}")
    if replay_until is not None and replay_until <= at:
        raise ForkRefused(f"--replay-until must come after --at ({at}), not {replay_until}")
    spec = read.spec()
    changed = []
    if prompt_edit is not None:
        spec["prompt"], changed = prompt_edit, [*changed, "prompt"]
    if agent_version is not None:
        spec["agent"], changed = agent_version, [*changed, "agent"]
    if model is not None:
        # Resolved by the worker, as an agent's own model string is (``TaskSpec.model``).
        spec["model"], changed = model, [*changed, "model"]
    spec.pop("thread", None)  # a fork continues its parent's conversation, not the thread's
    spec["fork"] = {"parent": read.task_id, "at": at, "replay_until": replay_until, "changed": changed}
    if history is not None:
        spec["fork"]["history"] = history
    return spec


async def parent_of(client: Client, task_id: str) -> tuple[str, int] | None:
    """The task a fork was forked from, and the step (None: not a fork, or no such task). Reads the
    first event of the task's latest run only."""
    from temporalio.service import RPCError

    try:
        async for event in client.get_workflow_handle(task_id).fetch_history_events():
            attrs = event.workflow_execution_started_event_attributes
            [value] = await client.data_converter.decode(list(attrs.input.payloads)) or [None]
            spec = value.get("spec", value) if isinstance(value, dict) else None
            fork = spec.get("fork") if isinstance(spec, dict) else None
            return (str(fork["parent"]), int(fork["at"])) if isinstance(fork, dict) else None
    except RPCError:
        return None
    return None


async def forks_of(client: Client, task_id: str, limit: int = 100) -> list[str]:
    """Forks of ``task_id`` started with the default ids (``<parent>.fork-<hex>``), found through
    visibility: a fork given an id of its own names its parent in its own tree, not here."""
    from temporalio.service import RPCError

    found: list[str] = []
    query = f"WorkflowId STARTS_WITH '{task_id}{FORK_ID_INFIX}'"
    try:
        async for execution in client.list_workflows(query, page_size=limit):
            if execution.id not in found and execution.id[len(task_id) + len(FORK_ID_INFIX) :].isalnum():
                found.append(execution.id)
            if len(found) >= limit:
                break
    except RPCError:
        return found
    return sorted(found)


def new_fork_id(parent: str) -> str:
    """A new task id for a fork of ``parent``."""
    return f"{parent[:180]}{FORK_ID_INFIX}{uuid.uuid4().hex[:8]}"


__all__ = [
    "ForkRefused",
    "TaskHistory",
    "TurnRecord",
    "chain_of",
    "chains_in",
    "continued_from",
    "fork_spec",
    "forks_of",
    "load_exported",
    "new_fork_id",
    "parent_of",
    "parse_exported",
    "read_exported",
    "read_histories",
    "read_history",
    "run_id_of",
    "steps_of",
]
