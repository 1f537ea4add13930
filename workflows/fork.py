"""A fork's start and its effect safety (docs/forks.md). Workflow code: deterministic, no I/O of its own.

A task whose spec names a parent (``TaskSpec.fork``, patch ``FORK_PATCH``, asked in the run's first
activation) begins, after its inputs are stored, with ``fork.prepare``: the parent's state at the
step, read from the parent's history. The fork takes the parent's conversation (and the results
the step's turn was given), its artifacts by digest and what it had spent; then it runs again, in
its own fresh sandbox, the commands the parent ran before the step (never in the parent's sandbox,
which the fork does not know how to reach: its sandbox is keyed by the fork's own task id).

From then on:

- a business write the fork proposes that is the same operation (record type, system, payload) as a
  write the parent committed is answered from the parent's receipt: the policy allows it (there is
  nothing to approve: nothing is written), ``write.reused`` records it, and the evidence names the
  parent's operation key (``WriteEvidence.reused_from``), confirmed by lookup at completion;
- any other write is the fork's own: its policy and approvals, its own operation key;
- a step before ``ForkSpec.replay_until`` is answered from the parent's recorded turn, not the model.
"""

from __future__ import annotations

import json
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityConfig

with workflow.unsafe.imports_passed_through():
    from agent_worker.activities.forks import ForkActivities
    from agent_worker.schemas.actions import BusinessWrite, ProposedAction, SandboxCommand
    from agent_worker.schemas.events import EventType
    from agent_worker.schemas.forks import ForkState, ParentWrite, PrepareForkInput, write_operation
    from agent_worker.schemas.tasks import FollowUp, PolicyVerdict, TaskState, Usage
    from agent_worker.schemas.turns import TurnResult
    from agent_worker.schemas.writes import WriteEvidence

from agent_worker.workflows import options
from agent_worker.workflows.context import TaskContext
from agent_worker.workflows.policy import PolicyDecision
from agent_worker.workflows.sandbox_effects import SandboxEffects

# ``fork.prepare`` reads the parent's history (a few pages) and may store a conversation.
PREPARE = ActivityConfig(
    start_to_close_timeout=timedelta(minutes=2),
    retry_policy=RetryPolicy(maximum_attempts=5, non_retryable_error_types=["fork_invalid"]),
    heartbeat_timeout=options.HEARTBEAT,
    summary="read the parent's state at the fork's step",
)
# ``Usage`` fields a fork carries over from its parent (what the parent had spent by the step).
CARRIED_USAGE = (
    "turns",
    "actions",
    "model_calls",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "sandbox_seconds",
)


async def begin(task: TaskContext, sandbox: SandboxEffects) -> None:
    """Take the parent's state at the step (``fork.prepare``) and rebuild its sandbox in a fresh one."""
    spec, state = task.valid_spec, task.state
    assert spec.fork is not None
    start = await workflow.execute_activity_method(
        ForkActivities.prepare,
        PrepareForkInput(task_id=task.task_id, fork=spec.fork, prompt=spec.prompt, agent=spec.agent),
        **options.config(PREPARE, summary=f"read {spec.fork.parent}'s state at step {spec.fork.at}"),
    )
    state.turn = start.turn
    state.conversation_ref = start.conversation_ref
    state.run_state_ref = start.run_state_ref
    state.pending_results = list(start.results)
    state.follow_ups[:0] = [FollowUp(text=text) for text in start.follow_ups]
    state.current_agent = start.current_agent
    state.mcp_catalog_ref = start.mcp_catalog_ref
    state.artifacts.extend(a for a in start.artifacts if a not in state.artifacts)
    spent = Usage.model_validate(start.usage)
    for name in CARRIED_USAGE:
        setattr(state.usage, name, getattr(spent, name))
    state.fork = ForkState(
        parent=start.parent, at=start.at, writes=start.writes, recorded_turns=start.recorded_turns
    )
    task.emit(
        EventType.FORK_STARTED,
        parent=start.parent,
        parent_run_chain=start.parent_run_chain,
        at=start.at,
        changed=list(spec.fork.changed),
        commands=len(start.commands),
        parent_writes=[w.operation_key for w in start.writes],
        prompt_replaced=start.prompt_replaced,
        replay_until=spec.fork.replay_until,
    )
    for replay in start.commands:
        assert isinstance(replay.action.operation, SandboxCommand)
        await sandbox.exec(replay.action, replay.action.operation)
        state.fork.replayed_commands += 1
        task.emit(
            EventType.FORK_COMMAND_REPLAYED,
            call_id=replay.action.call_id,
            argv=replay.action.operation.argv,
            parent_sandbox=replay.sandbox_id,
            sandbox_id=state.sandbox.sandbox_id if state.sandbox else None,
        )


def parent_write(state: TaskState, operation: object) -> ParentWrite | None:
    """The parent's committed write that ``operation`` repeats, not yet answered in this fork."""
    if state.fork is None or not isinstance(operation, BusinessWrite):
        return None
    digest = write_operation(operation.record_type, operation.system, operation.payload)
    for write in state.fork.writes:
        if write.operation == digest and write.operation_key not in state.fork.reused:
            return write
    return None


def verdict(state: TaskState, action: ProposedAction) -> PolicyDecision | None:
    """A write the parent committed needs no approval in the fork (nothing will be written); None:
    the policy decides, as for any task."""
    found = parent_write(state, action.operation)
    if found is None:
        return None
    assert state.fork is not None
    reason = (
        f"the parent {state.fork.parent} committed this write ({found.operation_key}); its receipt answers"
    )
    return PolicyDecision(PolicyVerdict.ALLOW, (), reason)


def reuse(task: TaskContext, action: ProposedAction, plan: BusinessWrite) -> str | None:
    """Answer a write the parent committed from the parent's receipt (nothing written); returns the
    model-visible receipt, or None when the write is the fork's own."""
    state = task.state
    found = parent_write(state, plan)
    if found is None:
        return None
    assert state.fork is not None
    state.fork.reused.append(found.operation_key)
    # Confirmed by lookup at completion, like any write whose own answer did not confirm it.
    state.writes.append(
        WriteEvidence(
            call_id=action.call_id,
            operation_key=found.operation_key,
            receipt=found.receipt,
            system=found.system,
            reused_from=state.fork.parent,
        )
    )
    task.emit(
        EventType.WRITE_REUSED,
        call_id=action.call_id,
        operation_key=found.operation_key,
        parent=state.fork.parent,
        record_id=found.receipt.record_id,
    )
    answer = {
        "outcome": found.receipt.outcome.value,
        "record_id": found.receipt.record_id,
        "operation_key": found.operation_key,
        "reused_from": state.fork.parent,
    }
    return json.dumps(answer, sort_keys=True)


def recorded_turn(state: TaskState, turn: int) -> TurnResult | None:
    """The parent's recorded result of ``turn`` when the fork replays it (``replay_until``), counted
    as replayed calls that cost nothing now; else None."""
    if state.fork is None:
        return None
    for index, recorded in enumerate(state.fork.recorded_turns):
        if recorded.get("turn") == turn:
            del state.fork.recorded_turns[index]  # used once: the state carries only those to come
            result = TurnResult.model_validate(recorded)
            usage = result.usage
            usage.replayed_calls = usage.model_calls
            usage.input_tokens = usage.output_tokens = 0
            usage.cost_usd = 0.0
            return result
    return None


__all__ = ["PREPARE", "begin", "parent_write", "recorded_turn", "reuse", "verdict"]
