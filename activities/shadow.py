"""The activities of shadow runs (``workflows.shadow``, ``workflows.shadow_task``).

- ``shadow.load`` (task queue): a recorded task's header, from the artifact store;
- ``shadow.turn`` (agent queue): one turn of the candidate agent, through the same turn code as a
  task's (``activities.agent.turn``: journal, providers, read tools), its proposed actions compared
  with the recorded task's by version;
- ``shadow.score`` (agent queue): the scorer callable on the final answers;
- ``shadow.save`` / ``shadow.report`` (task queue): a task's result stored; the run's JSON and
  Markdown reports written (``activities.shadow_report``).

The candidate is loaded by import path (``module:attribute``, an ``AgentRegistration`` or a list of
them) on the agent worker that takes its first turn, once per process; it must be importable there.
A list is searched for the recorded task's agent name, else its only entry is used. ``model`` (the
shadow's ``--model``) replaces the registration's model.
"""

from __future__ import annotations

import asyncio
import inspect
import json

from agent_worker.activities.agent import AgentActivities, AgentRegistration, AgentRegistry
from agent_worker.activities.agent.journal import ModelCallJournal
from agent_worker.activities.agent.registry import on_model
from agent_worker.activities.artifacts import ArtifactStore
from agent_worker.activities.errors import AgentError, activity_boundary
from agent_worker.activities.loading import load_object
from agent_worker.activities.shadow_report import render_markdown, report_document, summarize
from agent_worker.schemas.actions import ActionResult
from agent_worker.schemas.config import WorkerConfig
from agent_worker.schemas.shadow import (
    DIFFERENT,
    SAME,
    RecordedTask,
    ShadowAction,
    ShadowHeader,
    ShadowReportInput,
    ShadowReportResult,
    ShadowScoreInput,
    ShadowScoreResult,
    ShadowTaskRef,
    ShadowTaskResult,
    ShadowTurnInput,
    ShadowTurnOutput,
)
from agent_worker.schemas.turns import TurnInput
from temporalio import activity

# A scorer's detail is cut to this many characters (it travels in history).
SCORE_DETAIL_CHARS = 2000

__all__ = ["ShadowActivities", "match_actions"]


class ShadowActivities:
    """Shadow-run activities over the artifact store (and, for turns, the worker's model config)."""

    def __init__(self, store: ArtifactStore, config: WorkerConfig, journal: ModelCallJournal | None = None):
        self.store = store
        self.config = config
        self.journal = journal
        self._candidates: dict[tuple[str, str | None, str], tuple[AgentActivities, str]] = {}
        self._recorded: dict[str, RecordedTask] = {}

    @activity.defn(name="shadow.load")
    @activity_boundary
    async def load(self, input: ShadowTaskRef) -> ShadowHeader:
        """The recorded task's header: what the ``ShadowTask`` workflow needs to run it."""
        task = await asyncio.to_thread(self._recorded_task, input.ref)
        return ShadowHeader(
            **task.model_dump(
                include={
                    "task_id",
                    "agent",
                    "prompt",
                    "tenant",
                    "labels",
                    "policy",
                    "max_turns",
                    "inputs",
                    "sandbox",
                    "phase",
                    "final_output",
                    "cost_usd",
                    "model_calls",
                    "active_seconds",
                }
            ),
            recorded_actions=len(task.actions),
        )

    @activity.defn(name="shadow.turn")
    @activity_boundary
    async def turn(self, input: ShadowTurnInput) -> ShadowTurnOutput:
        """One candidate turn; each proposed action compared with the recorded ones."""
        agents, name = self._candidate(input.candidate, input.model, input.agent)
        recorded = await asyncio.to_thread(self._recorded_task, input.recorded_ref)
        results = await asyncio.to_thread(lambda: [self._readable(r) for r in input.results])
        result = await agents.turn(
            TurnInput(
                task_id=input.shadow_id,
                agent=name,
                turn=input.turn,
                prompt=input.prompt or "(continued)",
                inputs=input.inputs,
                run_state_ref=input.run_state_ref,
                results=results,
                conversation_ref=input.conversation_ref,
                run_chain=input.run_chain,
                tenant=input.tenant,
                current_agent=input.current_agent,
            )
        )
        actions = [
            ShadowAction(
                **a.model_dump(
                    include={
                        "call_id",
                        "tool",
                        "effect",
                        "arguments",
                        "operation",
                        "version",
                        "turn",
                        "agent",
                    }
                )
            )
            for a in result.proposed
        ]
        match_actions(actions, recorded, set(input.matched))
        return ShadowTurnOutput(
            turn=result.turn,
            status=result.status,
            final_output=result.final_output,
            actions=actions,
            invalid=result.invalid,
            conversation_ref=result.conversation_ref,
            run_state_ref=result.run_state_ref,
            agent=result.agent,
            model=result.model,
            model_calls=result.usage.model_calls,
            input_tokens=result.usage.input_tokens,
            output_tokens=result.usage.output_tokens,
            cost_usd=result.usage.cost_usd,
        )

    @activity.defn(name="shadow.score")
    @activity_boundary
    async def score(self, input: ShadowScoreInput) -> ShadowScoreResult:
        """The scorer on (prompt, recorded answer, candidate answer): a number, or the error it raised
        (a scorer's failure is reported, never retried: it is user code). A scorer with a ``config``
        parameter gets the worker's configuration (``activities.shadow_judge``)."""
        try:
            scorer = load_object(input.scorer, "scorer")
            given = {
                "task_id": input.task_id,
                "prompt": input.prompt,
                "recorded": input.recorded,
                "candidate": input.candidate,
            }
            if "config" in inspect.signature(scorer).parameters:  # e.g. the LLM judge
                given["config"] = self.config
            value = scorer(**given)
            if inspect.isawaitable(value):
                value = await value
            score, detail = value if isinstance(value, tuple) else (value, "")
            return ShadowScoreResult(score=float(score), detail=str(detail)[:SCORE_DETAIL_CHARS])
        except Exception as err:
            return ShadowScoreResult(error=f"{type(err).__name__}: {err}"[:SCORE_DETAIL_CHARS])

    @activity.defn(name="shadow.save")
    @activity_boundary
    async def save(self, input: ShadowTaskResult) -> str:
        """Store a task's shadow result; its digest."""
        return await asyncio.to_thread(self.store.put_json, input.model_dump(mode="json"))

    @activity.defn(name="shadow.report")
    @activity_boundary
    async def report(self, input: ShadowReportInput) -> ShadowReportResult:
        """Read every task's result and write the run's reports (JSON and Markdown) to the store."""
        return await asyncio.to_thread(self._report, input)

    def _report(self, input: ShadowReportInput) -> ShadowReportResult:
        results = [ShadowTaskResult.model_validate(self.store.get_json(r.ref)) for r in input.results]
        results += [
            ShadowTaskResult(task_id=task_id, phase="failed", error=error)
            for task_id, error in input.failed.items()
        ]
        summary = summarize(results)
        document = report_document(input, summary, results)
        json_ref = self.store.put(json.dumps(document, indent=2, sort_keys=True).encode("utf-8"))
        markdown_ref = self.store.put(render_markdown(document).encode("utf-8"))
        return ShadowReportResult(summary=summary, json_ref=json_ref, markdown_ref=markdown_ref)

    def _readable(self, result: ActionResult) -> ActionResult:
        """``result``, or, when the recorded output it names is not in this artifact store (histories
        exported from another deployment, replayed in CI), its inline text with a note instead."""
        if result.output_ref is None or self.store.exists(result.output_ref):
            return result
        note = f"(the recorded output {result.output_ref} is not in this artifact store)"
        return result.model_copy(update={"output_ref": None, "output": result.output or note})

    def _recorded_task(self, ref: str) -> RecordedTask:
        if ref not in self._recorded:
            self._recorded[ref] = RecordedTask.model_validate(self.store.get_json(ref))
        return self._recorded[ref]

    def _candidate(self, path: str, model: str | None, agent: str) -> tuple[AgentActivities, str]:
        """The candidate's turn runner (built once per process) and the registration's name."""
        key = (path, model, agent)
        if key not in self._candidates:
            try:
                value = load_object(path, "candidate agent")
            except ValueError as err:
                raise AgentError(str(err), operation="shadow.turn", retryable="no") from None
            found = value if isinstance(value, list | tuple) else [value]
            registrations = [r for r in found if isinstance(r, AgentRegistration)]
            chosen = next((r for r in registrations if r.name == agent), None)
            if chosen is None and len(registrations) == 1:
                chosen = registrations[0]
            if chosen is None:
                raise AgentError(
                    f"candidate {path!r} holds no AgentRegistration for agent {agent!r}",
                    operation="shadow.turn",
                    retryable="no",
                )
            chosen = on_model(chosen, model)
            self._candidates[key] = (
                AgentActivities(AgentRegistry([chosen]), self.store, self.config, self.journal),
                chosen.name,
            )
        return self._candidates[key]


def match_actions(actions: list[ShadowAction], recorded: RecordedTask, matched: set[int]) -> None:
    """Mark each of ``actions`` ``same`` as the first recorded action of its version not matched
    before (in this turn or an earlier one), with that action's recorded result; else ``different``."""
    taken = set(matched)
    for action in actions:
        index = next(
            (i for i, r in enumerate(recorded.actions) if i not in taken and r.version == action.version),
            None,
        )
        if index is None:
            action.match = DIFFERENT
            continue
        taken.add(index)
        action.match = SAME
        action.recorded_index = index
        action.recorded = recorded.actions[index].result
