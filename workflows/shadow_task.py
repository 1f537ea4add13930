"""``ShadowTask``: one recorded task replayed with a candidate agent, with no business effect.

The candidate runs turn by turn (``shadow.turn``, on the agent queue), from the recorded task's
prompt and inputs. Each action it proposes comes back compared with the recorded ones by version
(``schemas.shadow``); the workflow then decides, deterministically, what the candidate is told:

- the same version as a recorded action: the recorded result (its approval or rejection, the write's
  receipt, a tool's output), with no effect. A recorded sandbox command that ran is run again, in
  this shadow's own fresh sandbox, so later commands find the files they expect;
- a version nobody recorded: the recorded task's policy decides. A denied action is denied; a
  sandbox command the policy allows runs in the shadow sandbox; anything else (a business write, an
  action that would need an approval) is **diverged**: it is recorded, never executed, and the
  candidate is told it was not run.

No ``business.write``, ``tool.call`` or ``mcp.call`` activity is ever scheduled here. The final
answer is scored (``shadow.score``) when a scorer is named, and the task's ``ShadowTaskResult`` is
stored (``shadow.save``); the workflow returns its reference.
"""

from __future__ import annotations

import json
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from agent_worker.schemas.actions import (
        ActionResult,
        ActionStatus,
        EffectClass,
        ProposedAction,
        SandboxCommand,
        without_preview,
    )
    from agent_worker.schemas.sandbox import (
        CommandRecord,
        CreateSandboxInput,
        DestroySandboxInput,
        DestroySandboxResult,
        ExecInput,
        SandboxRef,
    )
    from agent_worker.schemas.shadow import (
        MAX_SHADOW_TURNS,
        SAME,
        ShadowAction,
        ShadowHeader,
        ShadowScoreInput,
        ShadowScoreResult,
        ShadowTaskInput,
        ShadowTaskRef,
        ShadowTaskResult,
        ShadowTurnInput,
        ShadowTurnOutput,
    )
    from agent_worker.schemas.tasks import PolicyVerdict

from agent_worker.workflows import options
from agent_worker.workflows.policy import evaluate

# What the candidate is told about an action the shadow did not run.
NOT_EXECUTED = (
    "shadow run: not executed. No recorded action has this version (tool, arguments, operation), "
    "so there is no recorded decision for it; it diverged from the recorded run."
)
ANSWERED = "answered from the record"
RAN_HERE = "ran in the shadow sandbox"
DENIED = "denied by policy"
DIVERGED = "diverged: not executed"
# A recorded result's output is kept in the task's shadow result up to this many characters.
RECORDED_PREVIEW_CHARS = 500


@workflow.defn(name="ShadowTask")
class ShadowTaskWorkflow:
    """Replays one recorded task with the candidate (see the module docstring)."""

    def __init__(self) -> None:
        self.sandbox: SandboxRef | None = None
        self.active_seconds = 0.0

    @workflow.run
    async def run(self, input: ShadowTaskInput) -> ShadowTaskRef:
        header = await workflow.execute_activity(
            "shadow.load",
            input.task,
            result_type=ShadowHeader,
            **options.config(options.INGEST, summary=f"read recorded task {input.task.task_id}"),
        )
        result = ShadowTaskResult(
            task_id=header.task_id,
            agent=header.agent,
            recorded_final_output=header.final_output,
            recorded_phase=header.phase,
            recorded_cost_usd=header.cost_usd,
            recorded_model_calls=header.model_calls,
            recorded_active_seconds=header.active_seconds,
        )
        try:
            await self._replay(input, header, result)
        except ActivityError as err:
            result.phase = "failed"
            result.error = str(err.cause or err)
        finally:
            await self._destroy_sandbox()
        result.different_actions = sum(1 for a in result.actions if a.match != SAME)
        result.same_actions = len(result.actions) - result.different_actions
        result.missing_actions = header.recorded_actions - result.same_actions
        result.diverged = result.different_actions > 0 or result.missing_actions > 0
        result.writes_proposed = sum(1 for a in result.actions if a.effect is EffectClass.WRITE)
        result.exact_match = result.final_output is not None and result.final_output == header.final_output
        if input.scorer and result.phase == "completed":
            result.score = await workflow.execute_activity(
                "shadow.score",
                ShadowScoreInput(
                    scorer=input.scorer,
                    task_id=header.task_id,
                    prompt=header.prompt,
                    recorded=header.final_output,
                    candidate=result.final_output,
                ),
                result_type=ShadowScoreResult,
                **options.config(options.TURN, summary="score the answer", task_queue=_queue(".agent")),
            )
        result.active_seconds = round(self.active_seconds, 3)
        ref = await workflow.execute_activity(
            "shadow.save",
            result,
            result_type=str,
            **options.config(options.INGEST, summary="store the task's shadow result"),
        )
        return ShadowTaskRef(task_id=header.task_id, ref=ref)

    async def _replay(self, input: ShadowTaskInput, header: ShadowHeader, result: ShadowTaskResult) -> None:
        info = workflow.info()
        turn_input = ShadowTurnInput(
            candidate=input.candidate,
            model=input.model,
            recorded_ref=input.task.ref,
            shadow_id=info.workflow_id,
            run_chain=info.run_id,
            agent=header.agent,
            turn=1,
            prompt=header.prompt,
            tenant=header.tenant,
            inputs=header.inputs,
        )
        matched: list[int] = []
        limit = min(header.max_turns or MAX_SHADOW_TURNS, MAX_SHADOW_TURNS)
        for turn in range(1, limit + 1):
            began = workflow.now()
            out = await workflow.execute_activity(
                "shadow.turn",
                turn_input.model_copy(update={"turn": turn, "matched": list(matched)}),
                result_type=ShadowTurnOutput,
                **options.config(options.TURN, summary=f"candidate turn {turn}", task_queue=_queue(".agent")),
            )
            self.active_seconds += (workflow.now() - began).total_seconds()
            result.turns = turn
            result.model_calls += out.model_calls
            result.cost_usd += out.cost_usd
            if out.status == "final":
                result.final_output = out.final_output
                return
            answers = list(out.invalid)
            for action in out.actions:
                if action.recorded_index is not None:
                    matched.append(action.recorded_index)
                answers.append(without_preview(await self._answer(action, header)))
                result.actions.append(_bounded(action))
            turn_input = turn_input.model_copy(
                update={
                    "prompt": "",
                    "conversation_ref": out.conversation_ref,
                    "run_state_ref": out.run_state_ref,
                    "current_agent": out.agent,
                    "results": answers,
                }
            )
        result.phase = "failed"
        result.error = f"the candidate did not finish within {limit} turns"

    async def _answer(self, action: ShadowAction, header: ShadowHeader) -> ActionResult:
        """What the candidate is told about ``action`` (and ``action.outcome``/``status`` set)."""
        recorded = action.recorded
        command = action.operation if isinstance(action.operation, SandboxCommand) else None
        if action.match == SAME:
            if command is not None and recorded is not None and recorded.status is ActionStatus.EXECUTED:
                answer = await self._exec(action, command, header)
                action.outcome = f"{RAN_HERE} (recorded: executed)"
            elif recorded is not None:
                answer = recorded.model_copy(update={"call_id": action.call_id})
                action.outcome = f"{ANSWERED} ({recorded.status.value})"
            else:
                answer = _refusal(action, ActionStatus.NOT_RUN, "the recorded run ended before this ran")
                action.outcome = f"{ANSWERED} (not run)"
        else:
            decision = evaluate(
                header.policy,
                _proposed(action),
                agent=header.agent,
                tenant=header.tenant,
                labels=header.labels,
            )
            if decision.verdict is PolicyVerdict.DENY:
                answer = _refusal(action, ActionStatus.DENIED, f"denied by policy: {decision.reason}")
                action.outcome = DENIED
            elif command is not None and decision.verdict is PolicyVerdict.ALLOW:
                answer = await self._exec(action, command, header)
                action.outcome = RAN_HERE
            else:
                answer = _refusal(action, ActionStatus.REJECTED, NOT_EXECUTED)
                action.outcome = DIVERGED
        action.status = answer.status
        return answer

    async def _exec(
        self, action: ShadowAction, command: SandboxCommand, header: ShadowHeader
    ) -> ActionResult:
        """Run ``command`` in this shadow's own sandbox (made by its first command, from the recorded
        task's inputs): never the original's."""
        info = workflow.info()
        create = None
        if self.sandbox is None:
            create = CreateSandboxInput(
                task_id=info.workflow_id,
                tenant=header.tenant,
                spec=header.sandbox,
                inputs=header.inputs,
                run_id=info.run_id,
                run_chain=info.run_id,
            )
        queue = (self.sandbox.home_queue if self.sandbox else None) or _queue(".sandbox")
        seconds = command.timeout_seconds or header.sandbox.command_timeout_seconds
        began = workflow.now()
        try:
            record = await workflow.execute_activity(
                "sandbox.exec",
                ExecInput(
                    task_id=info.workflow_id,
                    call_id=action.call_id,
                    sandbox=self.sandbox,
                    spec=header.sandbox,
                    command=command,
                    create=create,
                ),
                result_type=CommandRecord,
                **options.config(
                    options.SANDBOX_EXEC,
                    summary=f"{action.tool} ({action.call_id}) in the shadow sandbox",
                    task_queue=queue,
                    start_to_close=timedelta(seconds=seconds) + options.EXEC_GRACE,
                ),
            )
        except ActivityError as err:
            return _refusal(action, ActionStatus.FAILED, json.dumps({"error": str(err.cause or err)}))
        finally:
            self.active_seconds += (workflow.now() - began).total_seconds()
        if record.sandbox is not None:
            self.sandbox = record.sandbox
        preview = {
            "exit_code": record.exit_code,
            "timed_out": record.timed_out,
            "stdout": record.stdout[:2000],
            "stderr": record.stderr[:2000],
            "truncated": record.truncated,
        }
        return ActionResult(
            call_id=action.call_id,
            tool=action.tool,
            status=ActionStatus.EXECUTED,
            output=json.dumps(preview, sort_keys=True),
            output_ref=record.tool_output.digest if record.tool_output else None,
        )

    async def _destroy_sandbox(self) -> None:
        if self.sandbox is None:
            return
        sandbox, self.sandbox = self.sandbox, None
        try:
            await workflow.execute_activity(
                "sandbox.destroy",
                DestroySandboxInput(task_id=workflow.info().workflow_id, sandbox=sandbox),
                result_type=DestroySandboxResult,
                **options.config(
                    options.SANDBOX_DESTROY,
                    summary="destroy the shadow sandbox",
                    task_queue=sandbox.home_queue or _queue(".sandbox"),
                ),
            )
        except ActivityError:
            workflow.logger.warning("shadow sandbox %s left to the reaper", sandbox.sandbox_id)


def _bounded(action: ShadowAction) -> ShadowAction:
    """``action`` as the task's result keeps it: the recorded output cut to a preview (the whole is
    in the artifact store by ``output_ref`` when it was long), so a result stays a small payload."""
    if action.recorded is None or len(action.recorded.output) <= RECORDED_PREVIEW_CHARS:
        return action
    cut = action.recorded.output[:RECORDED_PREVIEW_CHARS] + "…"
    return action.model_copy(update={"recorded": action.recorded.model_copy(update={"output": cut})})


def _queue(suffix: str) -> str:
    return f"{workflow.info().task_queue}{suffix}"


def _proposed(action: ShadowAction) -> ProposedAction:
    return ProposedAction(
        call_id=action.call_id,
        tool=action.tool,
        effect=action.effect,
        arguments=action.arguments,
        operation=action.operation,
        version=action.version,
        turn=action.turn,
        agent=action.agent,
    )


def _refusal(action: ShadowAction, status: ActionStatus, message: str) -> ActionResult:
    return ActionResult(call_id=action.call_id, tool=action.tool, status=status, output=message)
