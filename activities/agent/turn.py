"""The ``agent.turn`` and ``agent.plan`` activities.

One turn runs the OpenAI Agents SDK ``Runner`` until the agent either answers or proposes calls to
tools with effects. Those stop the run (``needs_approval``); the turn plans each into an operation
and returns them as ``ProposedAction``s. The conversation goes to the artifact store and only its
digest returns to the workflow; the next turn starts from it with the workflow's results as the
pending calls' outputs. When only the SDK ``RunState`` can continue the run exactly (a handoff to
another agent, say: ``needs_run_state``), it is stored too, and the next turn loads it, approves or
rejects each pending call by the workflow's results, and runs on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import UTC, datetime
from typing import Any

import structlog
from agent_worker.activities.agent import compaction
from agent_worker.activities.agent.journal import JournaledModel, ModelCallJournal
from agent_worker.activities.agent.prepared import PreparedAgent, PreparedAgents
from agent_worker.activities.agent.provider_errors import provider_failure
from agent_worker.activities.agent.providers import SCRIPTED, AgentRoutedModel, ModelChain, check_models
from agent_worker.activities.agent.registry import AgentRegistry, find_agent, find_tool
from agent_worker.activities.agent.sandbox_agents import compact_after_tokens
from agent_worker.activities.agent.streaming import StreamingModel, TurnStream
from agent_worker.activities.agent.tool_records import ReadToolRecorder
from agent_worker.activities.agent.tools import (
    TurnServices,
    bind_turn,
    effect_of,
    parse_arguments,
    plan_call,
    unbind_turn,
)
from agent_worker.activities.artifacts import ArtifactStore
from agent_worker.activities.errors import AgentError, ToolPlanError, TurnError, activity_boundary
from agent_worker.activities.grants import GrantStore, find_grant
from agent_worker.activities.stores.streams import StreamBackend
from agent_worker.activities.tools import mcp as mcp_tools
from agent_worker.schemas.actions import RAN, ActionResult, ActionStatus, ProposedAction, action_version
from agent_worker.schemas.artifacts import ArtifactRef
from agent_worker.schemas.config import ConfigError, WorkerConfig
from agent_worker.schemas.grants import ActionBasis, GrantQuery, tool_schema_digest
from agent_worker.schemas.turns import (
    MAX_CALL_RECORDS,
    CompactionRecord,
    ModelCall,
    PlanInput,
    PlanResult,
    TurnInput,
    TurnResult,
    TurnUsage,
)
from agent_worker.security.redact import redact
from agent_worker.telemetry import metrics
from agents import Agent, Runner, RunResult
from agents.exceptions import MaxTurnsExceeded
from agents.items import ToolApprovalItem
from agents.run_state import RunState
from temporalio import activity

log = structlog.get_logger(__name__)

# What a turn hands the workflow is a Temporal payload (2 MB at most) that the task then carries: a
# model's answer past this many characters is kept whole as an artifact, and the tool arguments one
# response proposes are capped in total (past it, further calls go back to the model as errors).
FINAL_OUTPUT_CHARS = 200_000
MAX_PROPOSED_ARGUMENT_BYTES = 256_000


def journal_key(input: TurnInput) -> str:
    """Whose model calls the turn's journal holds: the task's run chain, so a reused task id (a new
    chain) is never answered with an earlier run's responses. Tasks without a chain keep the task id."""
    return input.task_id if input.run_chain is None else f"{input.task_id}\x00{input.run_chain}"


class AgentActivities:
    """Agent-kernel activities over a registry of agents and an artifact store."""

    def __init__(
        self,
        registry: AgentRegistry,
        store: ArtifactStore,
        config: WorkerConfig,
        journal: ModelCallJournal | None = None,
        streams: StreamBackend | None = None,
        grants: GrantStore | None = None,
    ) -> None:
        """``journal``: where completed model calls are kept (the worker passes the configured
        backend; default: the local one under the data dir). ``streams``: where turns write their
        live stream (the worker passes the configured ``stream_backend``; None: no live stream).
        ``grants``: where remembered grants are found for the actions a turn proposes, when the task's
        policy allows them (``TurnInput.grants``; None: never found).

        Raises ``ConfigError`` (naming the agent and the setting) when an agent's model cannot be
        resolved under ``config``, or cannot run durably here: the worker refuses to start rather
        than fail its first task. Each agent is built here, once; its turns share it
        (``activities.agent.prepared``)."""
        check_models((registry.get(name) for name in registry.names()), config)
        self.agents = PreparedAgents(registry, config)
        self.registry = registry
        self.store = store
        self.config = config
        self.journal = journal or ModelCallJournal(config.journal_dir)
        self.streams = streams
        self.grants = grants
        self._memory: Any = None

    @property
    def memory(self) -> Any:
        """The memory store ``recall`` reads (``activities.stores.memory``), built on first use."""
        if self._memory is None:
            from agent_worker.activities.stores.memory import build_memory_store

            self._memory = build_memory_store(self.config)
        return self._memory

    @activity.defn(name="agent.turn")
    @activity_boundary
    async def turn(self, input: TurnInput) -> TurnResult:
        """Run the agent until it answers or proposes effectful calls."""
        prepared = self.agents.get(input.agent, input.model)
        stream = TurnStream.for_attempt(self.streams, input.task_id, input.run_chain, input.turn)
        try:
            async with self._durable_agent(prepared, input.mcp_catalog_ref) as (agent, catalog_ref):
                result = await self._turn(input, prepared, agent, stream)
        except BaseException as err:
            stream.step("turn.failed", error=type(err).__name__)
            await stream.close()
            raise
        stream.step("turn.finished", status=result.status, proposed=len(result.proposed))
        await stream.close()
        return result.model_copy(update={"mcp_catalog_ref": catalog_ref})

    def _durable_agent(
        self, prepared: PreparedAgent, catalog_ref: str | None
    ) -> contextlib.AbstractAsyncContextManager[tuple[Agent, str | None]]:
        """The prepared agent (its sandbox capabilities, ``SandboxAgent``, already durable tools).
        One with MCP servers comes as a copy for this turn, its servers replaced by durable tools from
        the task's catalog (listed now when the task has none yet); the shared agent stays untouched."""
        agent = prepared.agent
        if not agent.mcp_servers:
            return contextlib.nullcontext((agent, None))
        return mcp_tools.durable_mcp_tools(
            agent,
            prepared.registration.mcp,
            self.store,
            catalog_ref,
            unsafe_dev=self.config.sandbox_unsafe_dev,
        )

    async def _turn(
        self, input: TurnInput, prepared: PreparedAgent, agent: Agent, stream: TurnStream
    ) -> TurnResult:
        registration = prepared.registration
        try:
            chain = self.agents.chain(prepared)
        except ConfigError as err:  # checked at worker start; a retry would not fix it
            raise AgentError(str(err), operation="agent.turn", retryable="no") from None
        model = JournaledModel(
            ModelChain(StreamingModel.wrap(chain, stream)),
            self.journal,
            journal_key(input),
            input.turn,
            stream=stream,
        )
        run_config = prepared.run_config_for(model)
        # Only a result kept in the store needs a read (in a thread); inline ones are here already.
        if any(result.output_ref for result in input.results):
            outputs = await asyncio.to_thread(self._tool_outputs, input.results)
        else:
            outputs = self._tool_outputs(input.results)
        services = TurnServices(
            store=self.store,
            inputs={ref.name: ref for ref in input.inputs},
            outputs=outputs,
            tenant=input.tenant,
            memory=lambda: self.memory,
        )
        context = {"task_id": input.task_id}
        recorder = _TurnHooks(
            self.store,
            input.turn,
            services.whole_outputs,
            [c.model for c in chain if isinstance(c.model, AgentRoutedModel)],
            stream,
        )
        token = bind_turn(services)
        compacted: CompactionRecord | None = None
        try:
            start = await self._start(agent, input, context, registration.max_model_calls, outputs)
            try:
                budget = (
                    registration.compact_after_tokens
                    or compact_after_tokens(agent)
                    or self.config.compact_after_tokens
                )
                if budget is not None and isinstance(start, list):
                    # Through the turn's journaled chain: a retried turn answers it from the journal.
                    found = await compaction.compact(start, budget, model, self.store, input.turn)
                    if found is not None:
                        start, compacted = found
                        services.saved.append(compacted.replaced)
                result = await Runner.run(
                    # A RunState knows its agent; a conversation starts on the one the task is on.
                    agent if isinstance(start, RunState) else find_agent(agent, input.current_agent) or agent,
                    start,
                    context=context,
                    run_config=run_config,
                    max_turns=registration.max_model_calls,
                    hooks=recorder,
                )
            except MaxTurnsExceeded:
                raise TurnError(
                    f"agent {input.agent!r} made more than {registration.max_model_calls} model calls "
                    "in one turn without finishing or proposing an action",
                    operation="agent.turn",
                ) from None
            except Exception as err:
                # An MCP server a read tool needs is down: Temporal retries the turn (then hands off).
                failure = mcp_tools.unavailable_cause(err) or provider_failure(err)
                if failure is None:
                    raise
                raise failure from err
        finally:
            unbind_turn(token)
        calls = [ModelCall.model_validate(record) for record in model.records if record]
        last = calls[-1] if calls else None
        # The model that answered the turn's last call names the turn (the first choice if none did).
        model_name = last.model if last else chain[0].label
        fresh = model.calls - model.replayed
        metrics.activity_counter("agent_worker_model_calls", fresh, model=model_name, replayed=False)
        metrics.activity_counter("agent_worker_model_calls", model.replayed, model=model_name, replayed=True)
        metrics.activity_counter(
            "agent_worker_model_tokens", model.usage.input_tokens, model=model_name, kind="input"
        )
        metrics.activity_counter(
            "agent_worker_model_tokens", model.usage.output_tokens, model=model_name, kind="output"
        )
        usage = TurnUsage(
            model_calls=model.calls,
            replayed_calls=model.replayed,
            input_tokens=model.usage.input_tokens,
            output_tokens=model.usage.output_tokens,
            cost_usd=self.config.cost_usd(
                model.usage.input_tokens,
                model.usage.output_tokens,
                real=not (last.provider == SCRIPTED if last else chain[0].scripted),
            ),
            provider=last.provider if last else chain[0].provider,
            api=last.api if last else chain[0].api,
        )
        if not usage.plain(model_name, calls):
            usage.calls = calls[:MAX_CALL_RECORDS]
        metrics.activity_counter(
            "agent_worker_model_cost_microusd", round(usage.cost_usd * 1e6), model=model_name
        )
        if not result.interruptions:
            conversation_ref, final_output = await asyncio.to_thread(self._finished, result, services)
            return TurnResult(
                turn=input.turn,
                status="final",
                final_output=final_output,
                conversation_ref=conversation_ref,
                artifacts=services.saved,
                usage=usage,
                model=model_name,
                tool_calls=recorder.records,
                tool_calls_dropped=recorder.dropped,
                compacted=compacted,
                agent=result.last_agent.name,
            )
        keep_state = self.config.run_state == "always" or needs_run_state(agent, result.last_agent)
        state_ref, conversation_ref = await asyncio.to_thread(self._paused, result, keep_state)
        proposed, invalid = _propose(result.interruptions, input.turn, registration.version)
        if input.grants is not None and self.grants is not None and proposed:
            proposed = await asyncio.to_thread(self._with_grants, input.grants, proposed)
        log.debug("turn proposed actions", task_id=input.task_id, turn=input.turn, proposed=len(proposed))
        return TurnResult(
            turn=input.turn,
            status="proposed",
            proposed=proposed,
            invalid=invalid,
            run_state_ref=state_ref,
            conversation_ref=conversation_ref,
            artifacts=services.saved,
            usage=usage,
            model=model_name,
            tool_calls=recorder.records,
            tool_calls_dropped=recorder.dropped,
            compacted=compacted,
            agent=result.last_agent.name,
        )

    def _with_grants(self, query: GrantQuery, proposed: list[ProposedAction]) -> list[ProposedAction]:
        """Each action with the remembered grant that answers it, if any, and the grants found void
        (``activities.grants.find_grant``); the task decides whether to use it."""
        assert self.grants is not None
        now = datetime.now(UTC)
        found = []
        for action in proposed:
            assert action.basis is not None  # set by ``_propose``
            grant, voided = find_grant(
                self.grants,
                query,
                tool=action.tool,
                effect=action.effect.value,
                arguments=action.arguments,
                caller=action.agent,
                tool_schema=action.basis.tool_schema,
                agent_version=action.basis.agent_version,
                now=now,
            )
            found.append(action.model_copy(update={"grant": grant, "voided_grants": voided}))
        return found

    async def _start(
        self, agent: Agent, input: TurnInput, context: dict[str, Any], max_calls: int, outputs: dict[str, str]
    ) -> Any:
        """What the run starts from: the stored RunState resumed with the workflow's decisions; or,
        for a long conversation (or a finished one that got follow-up input), the conversation itself
        with the workflow's results as the pending calls' outputs; or the task's prompt."""
        follow_ups = [{"role": "user", "content": text} for text in input.follow_ups]
        if input.conversation_ref is not None:
            items = await asyncio.to_thread(self.store.get_json, input.conversation_ref)
            if input.run_state_ref is None or len(items) > self.config.rebase_after_items:
                return [*items, *_pending_outputs(items, input.results, outputs), *follow_ups]
        if input.run_state_ref is not None:
            return await self._resume(agent, input, context, max_calls)
        return "\n\n".join([_first_message(input), *input.follow_ups])

    def _finished(self, result: RunResult, services: TurnServices) -> tuple[ArtifactRef, str]:
        """A finished run's conversation stored, and its final answer as the workflow carries it
        (one trip to a worker thread for both)."""
        conversation_ref = self.store.put_json(result.to_input_list())
        return conversation_ref, self._bounded_output(str(result.final_output), services)

    def _paused(self, result: RunResult, keep_state: bool) -> tuple[ArtifactRef | None, ArtifactRef]:
        """A run paused on proposed actions: its RunState stored when the task resumes from it, and
        its conversation (one trip to a worker thread for both)."""
        state_ref = self.store.put_json(result.to_state().to_json()) if keep_state else None
        return state_ref, self.store.put_json(result.to_input_list())

    def _bounded_output(self, text: str, services: TurnServices) -> str:
        """The final answer as the workflow carries it, redacted (``security.redact``: the task's
        result and status are for readers): whole up to ``FINAL_OUTPUT_CHARS``; past that, its head,
        with the whole answer saved as an artifact (named in the evidence)."""
        text = redact(text)
        if len(text) <= FINAL_OUTPUT_CHARS:
            return text
        ref = self.store.ref("final-output.txt", text.encode(), "text/plain")
        services.saved.append(ref)
        return (
            f"{text[:FINAL_OUTPUT_CHARS]}\n\n[the answer is {len(text):,} characters; the first "
            f"{FINAL_OUTPUT_CHARS:,} are here; the whole answer is the artifact final-output.txt, "
            f"{ref.digest}]"
        )

    def _tool_outputs(self, results: list[ActionResult]) -> dict[str, str]:
        """The text the model sees for each result: what its reference holds when it has one (a
        command's capped result, a long tool output's head and note), and for an edited action, a note
        that the approver changed its arguments."""
        outputs = {}
        for result in results:
            text = self.store.get(result.output_ref).decode("utf-8") if result.output_ref else result.output
            if result.status is ActionStatus.EDITED:
                text = json.dumps(
                    {
                        "note": "the approver changed the arguments before this ran",
                        "arguments": result.edited_arguments,
                        "result": _json_or_text(text),
                    },
                    sort_keys=True,
                )
            outputs[result.call_id] = text
        return outputs

    async def _resume(
        self, agent: Agent, input: TurnInput, context: dict[str, Any], max_calls: int
    ) -> RunState:
        """Load the stored RunState and decide each pending call by the workflow's results."""
        assert input.run_state_ref is not None
        state_json = await asyncio.to_thread(self.store.get_json, input.run_state_ref)
        # A resumed run keeps the SDK's cumulative call count and cap; the cap here is per turn.
        state_json["max_turns"] = int(state_json.get("current_turn", 0)) + max_calls
        state = await RunState.from_json(agent, state_json, context_override=context)
        results = {r.call_id: r for r in input.results}
        for item in state.get_interruptions():
            call_id = _call_id(item)
            result = results.get(call_id)
            if result is None:
                raise TurnError(
                    f"no result for pending call {call_id} ({item.tool_name})", operation="agent.turn"
                )
            if result.status in RAN:
                state.approve(item)
            else:
                state.reject(item, rejection_message=result.output)
        for text in input.follow_ups:
            state.add_input(text)
        return state

    @activity.defn(name="agent.plan")
    @activity_boundary
    async def plan(self, input: PlanInput) -> PlanResult:
        """Plan an effectful call with (edited) arguments; invalid arguments are an answer, not an error."""
        async with self._durable_agent(self.agents.get(input.agent), input.mcp_catalog_ref) as (agent, _):
            try:
                tool = find_tool(agent, input.tool, owner=input.owner or None)
                return PlanResult(operation=plan_call(tool, input.arguments))
            except ToolPlanError as err:
                return PlanResult(error=str(err))


class _TurnHooks(ReadToolRecorder):
    """The turn's run hooks: read tool records, and which agent calls the model next (for the
    scripted models of a handoff's specialist, ``AgentRoutedModel``)."""

    def __init__(
        self,
        store: ArtifactStore,
        turn: int,
        whole_outputs: dict[str, str],
        routed: list[AgentRoutedModel],
        stream: TurnStream,
    ) -> None:
        super().__init__(store, turn, whole_outputs)
        self._routed = routed
        self._stream = stream

    async def on_llm_start(self, context: Any, agent: Agent[Any], *args: Any) -> None:
        for model in self._routed:
            model.current = agent.name

    async def on_tool_end(self, context: Any, agent: Agent[Any], tool: Any, result: object) -> None:
        await super().on_tool_end(context, agent, tool, result)
        if self._read_only(tool):
            self._stream.tool_result(tool.name, getattr(context, "tool_call_id", None), result)


def needs_run_state(agent: Agent[Any], last_agent: Agent[Any]) -> bool:
    """Whether the next turn must resume the SDK's RunState, because the conversation plus the
    workflow's results would not give the same run: the run handed off to another agent, or the agent
    treats tool results, tool choice or input guardrails in ways that only the RunState remembers.

    Otherwise the next turn starts from the conversation, which costs a small fraction of validating
    and storing the RunState (a cost that grows with every item).
    """
    return (
        last_agent.name != agent.name
        or agent.tool_use_behavior != "run_llm_again"
        or agent.model_settings.tool_choice is not None
        or bool(agent.input_guardrails)
    )


def _pending_outputs(
    items: list[dict[str, Any]], results: list[ActionResult], outputs: dict[str, str]
) -> list[dict[str, Any]]:
    """Tool outputs for the calls in ``items`` that have none yet: what the model would see had the
    RunState been resumed (the tool's result, or the refusal message for a refused call)."""
    answered = {i.get("call_id") for i in items if i.get("type") == "function_call_output"}
    by_call = {r.call_id: r for r in results}
    pending = []
    for item in items:
        call_id = item.get("call_id")
        if item.get("type") != "function_call" or call_id in answered:
            continue
        result = by_call.get(call_id)
        if result is None:
            raise TurnError(
                f"no result for pending call {call_id} ({item.get('name')})", operation="agent.turn"
            )
        text = outputs[call_id] if result.status in RAN else result.output
        pending.append({"type": "function_call_output", "call_id": call_id, "output": text})
    return pending


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _first_message(input: TurnInput) -> str:
    if not input.inputs:
        return input.prompt
    listing = "\n".join(f"- {ref.name} ({ref.size} bytes, {ref.digest})" for ref in input.inputs)
    return f"{input.prompt}\n\nInput files (in the sandbox work dir):\n{listing}"


def _call_id(item: ToolApprovalItem) -> str:
    raw = item.raw_item
    call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    if not call_id:
        raise TurnError(f"pending call to {item.tool_name} has no call id", operation="agent.turn")
    return str(call_id)


def _propose(
    items: list[ToolApprovalItem], turn: int, agent_version: str = ""
) -> tuple[list[ProposedAction], list[ActionResult]]:
    """Plan each interrupted call; calls that cannot be planned go back to the model as failures.
    Each action carries its basis (its tool's schema digest, the agent's ``agent_version``)."""
    proposed: list[ProposedAction] = []
    invalid: list[ActionResult] = []
    proposed_bytes = 0
    for item in items:
        call_id = _call_id(item)
        tool_name = item.tool_name or ""
        raw = item.raw_item
        raw_args = raw.get("arguments") if isinstance(raw, dict) else getattr(raw, "arguments", "")
        try:
            tool = find_tool(item.agent, tool_name, owner=item.agent.name)
            declaration = effect_of(tool)
            if declaration is None:
                raise ToolPlanError(
                    f"{tool_name} needs approval but declares no effect; use sandbox_tool or write_tool",
                    operation="agent.turn",
                )
            raw_args = raw_args or "{}"
            if proposed_bytes + len(raw_args) > MAX_PROPOSED_ARGUMENT_BYTES:
                raise ToolPlanError(
                    f"this response's tool arguments pass {MAX_PROPOSED_ARGUMENT_BYTES:,} bytes in "
                    "total; propose fewer or smaller calls at once",
                    operation="agent.turn",
                )
            arguments = parse_arguments(raw_args)
            operation = plan_call(tool, arguments)
            proposed_bytes += len(raw_args)
        except ToolPlanError as err:
            invalid.append(
                ActionResult(
                    call_id=call_id, tool=tool_name, status=ActionStatus.FAILED, output=f"error: {err}"
                )
            )
            continue
        proposed.append(
            ProposedAction(
                call_id=call_id,
                tool=tool_name,
                effect=declaration.effect,
                arguments=arguments,
                operation=operation,
                version=action_version(tool_name, arguments, operation),
                turn=turn,
                agent=item.agent.name,
                basis=ActionBasis(
                    tool_schema=tool_schema_digest(tool_name, tool.params_json_schema),
                    agent_version=agent_version,
                ),
            )
        )
    return proposed, invalid


__all__ = ["AgentActivities"]
