"""Running calls of the effect tools an agent brought: its own functions (``tool.call``) and its MCP
servers' write- and sandbox-class tools (``mcp.call``). Workflow code: deterministic, no I/O.

Each call runs as its own activity under an operation key derived from the task's run chain and the
call id (the same on every retry and worker), with the tool's own timeout and attempts. A retried
attempt looks the key up first when the tool has a lookup, so a call whose answer was lost is found,
not made again. When the attempts run out the outcome is unknown: the task hands off, naming the
tool and its key, for a human to check.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from agent_worker.activities.tools.activities import ToolActivities
    from agent_worker.schemas.actions import FunctionCall, McpCall, ProposedAction
    from agent_worker.schemas.digests import digest_json
    from agent_worker.schemas.events import EventType
    from agent_worker.schemas.tasks import TaskPhase
    from agent_worker.schemas.tools import ToolCallInput, ToolCallResult, ToolEffectRecord
    from agent_worker.schemas.writes import operation_key

from agent_worker.workflows import bounds, options
from agent_worker.workflows.context import TaskContext
from agent_worker.workflows.failures import failure_code, failure_message
from agent_worker.workflows.handoff import HandOff
from agent_worker.workflows.placement import Placement

# Failures raised before the tool was called (no such agent or tool, arguments that no longer fit):
# nothing happened, so the hand-off says so rather than "outcome unknown".
_NEVER_RAN = frozenset({"unknown_agent", "tool_plan_error"})


# Past the steps of an MCP call, the attempt's own bound: the step that overran ends it first, named.
_MCP_MARGIN_SECONDS = 5.0


def _start_to_close(call: FunctionCall | McpCall) -> timedelta:
    """How long one attempt may run. An MCP call's ``timeout_seconds`` bounds each of its steps
    (connecting, the lookup on a retry, the call), so the attempt gets their sum and a margin: the
    step that overruns fails the attempt as ``mcp_unavailable``, saying which, rather than the
    attempt being cut short mid-step by Temporal with a bare ``StartToClose`` timeout."""
    if isinstance(call, McpCall):
        steps = 3 if call.lookup_tool and call.key_argument else 2
        return timedelta(seconds=call.timeout_seconds * steps + _MCP_MARGIN_SECONDS)
    return timedelta(seconds=call.timeout_seconds)


class ToolEffects:
    """Runs one task's calls of effect tools the agent brought, and records them as evidence."""

    def __init__(self, task: TaskContext, *, placement: Placement) -> None:
        self.task = task
        self.placement = placement

    async def run(self, action: ProposedAction, call: FunctionCall | McpCall) -> ToolCallResult:
        """Run the call once under its operation key; returns what the model sees.

        Raises:
            HandOff: the call did not settle within its attempts (its outcome is unknown).
        """
        state = self.task.state
        key = operation_key(self.task.task_id, action.call_id, state.run_chain)
        call_input = ToolCallInput(
            task_id=self.task.task_id,
            agent=self.task.valid_spec.agent,
            call_id=action.call_id,
            operation_key=key,
            operation=call,
            mcp_catalog_ref=state.mcp_catalog_ref,
            owner=action.agent,
        )
        source, target = (
            ("mcp", call.server) if isinstance(call, McpCall) else ("function", call.system or "")
        )
        named = {"call_id": action.call_id, "tool": action.tool, "source": source, "target": target}
        summary = f"{action.tool} ({action.call_id}) under {key}"
        timeout = _start_to_close(call)
        base = options.config(options.TOOL_CALL, attempts=call.max_attempts)
        self.task.set_phase(TaskPhase.COMMITTING)
        try:
            if isinstance(call, FunctionCall) and call.role == "business":
                bounds.check(f"the input of {summary}", call_input)
                result = await workflow.execute_activity_method(
                    ToolActivities.call_function,
                    call_input,
                    **options.config(
                        base, summary=summary, start_to_close=timeout, task_queue=options.business_queue()
                    ),
                )
            else:
                activity = (
                    ToolActivities.call_mcp if isinstance(call, McpCall) else ToolActivities.call_function
                )
                result = await self.placement.execute(
                    "agent", activity, call_input, base, summary=summary, start_to_close=timeout
                )
        except ActivityError as err:
            if is_cancelled_exception(err):
                raise
            message = failure_message(err)
            self.task.emit(EventType.TOOL_EFFECT, **named, operation_key=key, error=message)
            what = f"{action.tool} ({source} {target or 'tool'})"
            if failure_code(err) in _NEVER_RAN:
                raise HandOff(f"{what} could not run: {message}") from None
            raise HandOff(
                f"{what} under {key} did not settle after "
                f"{call.max_attempts} attempt(s); its outcome is unknown: {message}"
            ) from None
        self.task.set_phase(TaskPhase.RUNNING)
        state.tool_effects.append(
            ToolEffectRecord(
                call_id=action.call_id,
                tool=action.tool,
                source=source,
                target=target,
                operation_key=key,
                arguments_digest=digest_json(call.arguments),
                output_digest=result.output_digest,
                is_error=result.is_error,
                replayed=result.replayed,
            )
        )
        self.task.emit(
            EventType.TOOL_EFFECT,
            **named,
            operation_key=key,
            is_error=result.is_error,
            replayed=result.replayed,
            output_digest=result.output_digest,
        )
        return result
