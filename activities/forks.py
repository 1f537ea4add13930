"""The ``fork.prepare`` activity: a parent task's state at one of its steps (docs/forks.md).

It reads the parent's history (``activities.task_history.read_history``: every run of its chain;
or the exported history the fork names, ``ForkSpec.history``, from the artifact store) and
answers what the fork's workflow takes into its state: the input the parent's turn at that step was
given (its conversation and RunState by digest, the results of the previous step's actions, the
follow-up input), the artifacts made before the step, what had been spent, the commands to run again
in the fork's own sandbox, and every business write the parent committed (any step: those are never
repeated). A fork whose prompt differs gets a copy of the conversation with the parent's prompt
replaced in its first user message (and no RunState, which would carry the old one).
"""

from __future__ import annotations

import asyncio
from typing import Any

from agent_worker.activities.artifacts import ArtifactStore
from agent_worker.activities.errors import activity_boundary
from agent_worker.activities.task_history import ForkRefused, TaskHistory, read_exported, read_history
from agent_worker.schemas.actions import EffectClass, ProposedAction, SandboxCommand, action_version
from agent_worker.schemas.forks import (
    ForkSpec,
    ForkStart,
    ParentWrite,
    PrepareForkInput,
    ReplayCommand,
    write_operation,
)
from agent_worker.schemas.tasks import Usage
from agent_worker.schemas.turns import TurnInput, TurnResult
from agent_worker.schemas.writes import WriteInput, WriteOutcome, WriteReceipt
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

# The error type of a fork that cannot be made (no such parent or step): not retried.
FORK_INVALID = "fork_invalid"
REPLAY_TOOL = "fork.replay"


class ForkActivities:
    """``fork.prepare`` over a Temporal client (to read the parent's history) and the artifact store."""

    def __init__(self, client: Client, store: ArtifactStore) -> None:
        self.client = client
        self.store = store

    @activity.defn(name="fork.prepare")
    @activity_boundary
    async def prepare(self, input: PrepareForkInput) -> ForkStart:
        """The parent's state at ``input.fork.at``."""
        fork = input.fork
        if fork.parent == input.task_id:
            raise ApplicationError("a task cannot fork itself", type=FORK_INVALID, non_retryable=True)
        try:
            read = await self._read(fork)
        except ForkRefused as err:
            raise ApplicationError(str(err), type=FORK_INVALID, non_retryable=True) from None
        if fork.at not in read.turns:
            last = max(read.turns, default=0)
            raise ApplicationError(
                f"task {fork.parent} has steps 1 to {last}; there is no step {fork.at}",
                type=FORK_INVALID,
                non_retryable=True,
            )
        turn_input = TurnInput.model_validate(read.turns[fork.at].input)
        before = [
            TurnResult.model_validate(read.turns[t].result)
            for t in read.turns
            if t < fork.at and read.turns[t].result
        ]
        start = ForkStart(
            parent=fork.parent,
            parent_run_chain=read.run_chain,
            at=fork.at,
            turn=fork.at - 1,
            conversation_ref=turn_input.conversation_ref if fork.at > 1 else None,
            run_state_ref=turn_input.run_state_ref if fork.at > 1 else None,
            results=turn_input.results if fork.at > 1 else [],
            follow_ups=turn_input.follow_ups if fork.at > 1 else [],
            current_agent=turn_input.current_agent,
            mcp_catalog_ref=turn_input.mcp_catalog_ref,
            usage=_spent(read, before, fork.at),
            commands=_commands(read, before, fork.at),
            writes=_writes(read),
            recorded_turns=[
                read.turns[t].result
                for t in range(fork.at, fork.replay_until or fork.at)
                if t in read.turns and read.turns[t].result
            ],
        )
        for result in before:
            start.artifacts.extend(a for a in result.artifacts if a not in start.artifacts)
        for turn, record in read.commands:
            if turn < fork.at:
                start.artifacts.extend(a for a in _outputs(record) if a not in start.artifacts)
        try:
            await self._check_stored(start)
        except ForkRefused as err:
            raise ApplicationError(str(err), type=FORK_INVALID, non_retryable=True) from None
        parent_prompt = str(read.spec().get("prompt", ""))
        if fork.at > 1 and input.prompt != parent_prompt and start.conversation_ref is not None:
            start.conversation_ref = await asyncio.to_thread(
                self._replace_prompt, start.conversation_ref, parent_prompt, input.prompt
            )
            start.run_state_ref, start.prompt_replaced = None, True
        if input.agent and input.agent != read.spec().get("agent"):
            # Another agent: its own tools and SDK agents; the conversation carries over, the RunState not.
            start.run_state_ref, start.current_agent, start.mcp_catalog_ref = None, "", None
        return start

    async def _read(self, fork: ForkSpec) -> TaskHistory:
        """The parent's history: the cluster's, or the exported one the fork names."""
        if fork.history is None:
            return await read_history(self.client, fork.parent)
        if not await asyncio.to_thread(self.store.exists, fork.history):
            raise ForkRefused(f"the exported history {fork.history} is not in this artifact store")
        exported = await asyncio.to_thread(self.store.get_json, fork.history)
        return await read_exported(fork.parent, exported, self.client.data_converter)

    async def _check_stored(self, start: ForkStart) -> None:
        """A conversation or RunState the step needs must be in this artifact store (a history
        exported from another deployment names digests of its store).

        Raises:
            ForkRefused: one is missing, naming it.
        """
        for ref in (start.conversation_ref, start.run_state_ref):
            if ref is not None and not await asyncio.to_thread(self.store.exists, ref):
                raise ForkRefused(
                    f"step {start.at} of {start.parent} continues a conversation ({ref}) that is not in "
                    "this artifact store (a history exported elsewhere): fork at step 1, or copy the "
                    "artifacts over"
                )

    def _replace_prompt(self, conversation_ref: str, old: str, new: str) -> str:
        """A copy of the conversation with ``old`` replaced by ``new`` in its first user message."""
        items = self.store.get_json(conversation_ref)
        for item in items:
            if item.get("role") == "user" and isinstance(item.get("content"), str):
                item["content"] = item["content"].replace(old, new, 1) if old in item["content"] else new
                break
        return self.store.put_json(items)


def _outputs(record: dict[str, Any]) -> list[Any]:
    from agent_worker.schemas.artifacts import ArtifactRef

    return [ArtifactRef.model_validate(o) for o in record.get("outputs", [])]


def _spent(read: TaskHistory, before: list[TurnResult], at: int) -> dict[str, Any]:
    """What the parent had spent before step ``at`` (``Usage`` fields)."""
    usage = Usage(turns=at - 1)
    for result in before:
        usage.model_calls += result.usage.model_calls
        usage.input_tokens += result.usage.input_tokens
        usage.output_tokens += result.usage.output_tokens
        usage.cost_usd += result.usage.cost_usd
    commands = [c for t, c in read.commands if t < at]
    usage.sandbox_seconds = sum(int(c.get("duration_ms", 0)) for c in commands) / 1000
    usage.actions = len(commands) + sum(1 for t, _, _ in read.writes if t < at)
    return usage.model_dump(mode="json")


def _commands(read: TaskHistory, before: list[TurnResult], at: int) -> list[ReplayCommand]:
    """The parent's commands before step ``at``, each as the action it ran (its planned command when
    the turn's proposal is found with the same argv, else the argv it ran)."""
    proposed = {a.call_id: a for result in before for a in result.proposed}
    commands = []
    for turn, record in read.commands:
        if turn >= at:
            continue
        call_id, argv = str(record["call_id"]), list(record["argv"])
        action = proposed.get(call_id)
        if (
            action is not None
            and isinstance(action.operation, SandboxCommand)
            and action.operation.argv == argv
        ):
            operation = action.operation
        else:
            operation = SandboxCommand(argv=argv)
        arguments = {"argv": argv}
        replay = ProposedAction(
            call_id=f"replay-{call_id}",
            tool=REPLAY_TOOL,
            effect=EffectClass.SANDBOX,
            arguments=arguments,
            operation=operation,
            version=action_version(REPLAY_TOOL, arguments, operation),
            turn=turn,
        )
        commands.append(ReplayCommand(action=replay, sandbox_id=str(record.get("sandbox_id", ""))))
    return commands


def _writes(read: TaskHistory) -> list[ParentWrite]:
    """Every write the parent committed, at any step, and those its own parent had (a fork of a
    fork): a fork never writes them again."""
    writes = []
    for _, value, result in read.writes:
        write, receipt = WriteInput.model_validate(value), WriteReceipt.model_validate(result)
        if receipt.outcome is not WriteOutcome.COMMITTED:
            continue
        writes.append(
            ParentWrite(
                operation_key=write.operation_key,
                operation=write_operation(write.record_type, write.system, write.payload),
                receipt=receipt,
                system=write.system,
            )
        )
    known = {w.operation_key for w in writes}
    for value in read.inherited:
        inherited = ParentWrite.model_validate(value)
        if inherited.operation_key not in known:
            writes.append(inherited)
            known.add(inherited.operation_key)
    return writes


__all__ = ["FORK_INVALID", "ForkActivities"]
