"""Evidence a task keeps, and how it keeps the state it carries bounded.

A task's evidence (command records, artifact references) grows with every command it runs. All of it
travels in ``TaskState`` across continue-as-new, and Temporal refuses a payload over 2 MB: the task's
next workflow task would then fail forever. So at each continue-as-new, and at the end, the older
records move to the artifact store as ``EvidenceArchive`` documents (activity ``artifacts.archive``,
or ``artifacts.archive_stored`` by the digests the records were stored under), and the state and the
result keep their references and the newest ``spec.inline_evidence`` records. If the state is still
too large to carry (follow-up input piling up while the task waits, say), the task hands off,
explained, instead.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from agent_worker.activities.artifacts import ArtifactActivities
    from agent_worker.schemas.artifacts import ArtifactRef
    from agent_worker.schemas.events import EventType
    from agent_worker.schemas.sandbox import CommandRecord, record_digest
    from agent_worker.schemas.tasks import (
        INLINE_EVIDENCE,
        INLINE_EVIDENCE_BEFORE,
        MAX_INLINE_TOOL_CALLS,
        Evidence,
        EvidenceArchive,
        StoredArchive,
        TaskInput,
        TaskState,
    )
    from agent_worker.schemas.turns import TurnResult

from agent_worker.workflows import options
from agent_worker.workflows.bounds import size_of
from agent_worker.workflows.context import TaskContext
from agent_worker.workflows.failures import failure_code
from agent_worker.workflows.handoff import HandOff
from agent_worker.workflows.patches import ARCHIVE_EVIDENCE_PATCH, BOUNDED_PATCH, LEAN_EVIDENCE_PATCH, patched

# Temporal refuses payloads over 2 MB (TMPRL1103); leave room for the envelope and the next run's start.
MAX_CARRIED_BYTES = 1_500_000
# Each archive activity's input stays well under that limit too.
ARCHIVE_PART_BYTES = 500_000
# Command records and artifact references kept inline, in bytes of JSON, once payloads are bounded
# (``BOUNDED_PATCH``): a record can hold up to 2 MiB of output, so a count alone does not bound them.
INLINE_EVIDENCE_BYTES = 500_000


def missing_outputs(commands: list[CommandRecord]) -> list[str]:
    """The evidence's ``missing`` lines for commands whose declared output files were not found."""
    return [
        f"command {c.call_id} output artifacts missing: {', '.join(c.missing_outputs)}"
        for c in commands
        if c.missing_outputs
    ]


def evidence_of(state: TaskState) -> Evidence:
    """The task's evidence; anything it cannot show is listed in ``missing``."""
    missing = [
        f"write {w.operation_key} not confirmed by lookup" for w in state.writes if w.confirmed is not True
    ]
    missing += state.lost_sandboxes
    missing += state.archived_missing
    missing += missing_outputs(state.commands)
    return Evidence(
        inputs=state.inputs,
        artifacts=state.artifacts,
        commands=state.commands,
        approvals=state.decisions,
        writes=state.writes,
        delegations=state.delegations,
        tool_calls=state.tool_calls,
        tool_calls_dropped=state.tool_calls_dropped,
        tool_effects=state.tool_effects,
        missing=missing,
        archived=state.archived_evidence,
        forked_from=state.fork.origin() if state.fork else None,
    )


def _overflow(items: list[CommandRecord] | list[ArtifactRef], budget: int) -> int:
    """How many of the oldest ``items`` must go for the newest to fit in ``budget`` bytes of JSON."""
    size = 0
    for kept, item in enumerate(reversed(items)):
        size += size_of(item)
        if size > budget:
            return len(items) - kept
    return 0


def _parts(
    commands: list[CommandRecord], artifacts: list[ArtifactRef]
) -> list[tuple[list[CommandRecord], list[ArtifactRef]]]:
    """Split what is to be archived into parts of at most ``ARCHIVE_PART_BYTES`` of JSON each."""
    parts: list[tuple[list[CommandRecord], list[ArtifactRef]]] = [([], [])]
    size = 0
    for index, items in enumerate((commands, artifacts)):
        for item in items:
            item_size = len(item.model_dump_json())
            if size + item_size > ARCHIVE_PART_BYTES and (parts[-1][0] or parts[-1][1]):
                parts.append(([], []))
                size = 0
            parts[-1][index].append(item)
            size += item_size
    return parts


class EvidenceKeeper:
    """Moves a task's older evidence out of its state before continue-as-new."""

    def __init__(self, task: TaskContext) -> None:
        self.task = task

    def inline_limit(self) -> int:
        """How many command records and artifact references the task keeps inline: the spec's
        ``inline_evidence``, else ``INLINE_EVIDENCE`` (``INLINE_EVIDENCE_BEFORE`` for a run begun
        before ``LEAN_EVIDENCE_PATCH``)."""
        limit = self.task.valid_spec.inline_evidence
        if limit is not None:
            return limit
        return INLINE_EVIDENCE if patched(LEAN_EVIDENCE_PATCH) else INLINE_EVIDENCE_BEFORE

    async def archive_older(self, at_end: bool = False) -> None:
        """Archive all but the newest ``inline_limit()`` command records and artifact references, and
        older ones still while the newest pass ``INLINE_EVIDENCE_BYTES``. At the task's end
        (``at_end``) only by bytes, for runs begun before ``LEAN_EVIDENCE_PATCH``: since, the result
        keeps the same newest ones as a continued run, so it grows no more with the task's length."""
        state, lean = self.task.state, patched(LEAN_EVIDENCE_PATCH)
        keep = self.inline_limit()
        by_count = lean or not at_end
        old_commands = max(len(state.commands) - keep, 0) if by_count else 0
        old_artifacts = max(len(state.artifacts) - keep, 0) if by_count else 0
        if patched(BOUNDED_PATCH):
            old_commands = max(old_commands, _overflow(state.commands, INLINE_EVIDENCE_BYTES))
            old_artifacts = max(old_artifacts, _overflow(state.artifacts, INLINE_EVIDENCE_BYTES))
        commands, artifacts = state.commands[:old_commands], state.artifacts[:old_artifacts]
        if not (commands or artifacts) or not patched(ARCHIVE_EVIDENCE_PATCH):
            return
        for part_commands, part_artifacts in _parts(commands, artifacts):
            ref = await self.archive_part(part_commands, part_artifacts, stored=lean)
            state.archived_evidence.append(ref)
            state.archived_missing += missing_outputs(part_commands)
            del state.commands[: len(part_commands)]
            del state.artifacts[: len(part_artifacts)]
            self.task.emit(
                EventType.EVIDENCE_ARCHIVED,
                part=ref.name,
                digest=ref.digest,
                commands=len(part_commands),
                artifacts=len(part_artifacts),
            )

    async def archive_part(
        self, commands: list[CommandRecord], artifacts: list[ArtifactRef], *, stored: bool
    ) -> ArtifactRef:
        """Store one part of the older evidence; its reference. With ``stored``, the records go by
        the digests ``sandbox.exec`` stored them under (``artifacts.archive_stored``), so the task's
        history holds each record once; a record the store lacks (run before records were stored),
        or holds damaged, sends the part with its records inline, as before (``artifacts.archive``)."""
        part = len(self.task.state.archived_evidence) + 1
        summary = f"archive older evidence: {len(commands)} commands, {len(artifacts)} artifacts"
        if stored:
            digests = [record_digest(c) for c in commands]
            try:
                return await workflow.execute_activity_method(
                    ArtifactActivities.archive_stored,
                    StoredArchive(
                        task_id=self.task.task_id,
                        part=part,
                        commands=digests,
                        takeovers={
                            d: c.takeover_seconds
                            for d, c in zip(digests, commands, strict=True)
                            if c.takeover_seconds is not None
                        },
                        artifacts=artifacts,
                    ),
                    **options.config(options.INGEST, summary=f"{summary} (by digest)"),
                )
            except ActivityError as err:
                # Missing, damaged, or no longer a record this code reads: the part goes inline.
                if failure_code(err) not in ("artifact_not_found", "artifact_corrupt", "invalid_payload"):
                    raise
        return await workflow.execute_activity_method(
            ArtifactActivities.archive,
            EvidenceArchive(task_id=self.task.task_id, part=part, commands=commands, artifacts=artifacts),
            **options.config(options.INGEST, summary=summary),
        )

    def record_tool_calls(self, result: TurnResult) -> None:
        """Keep a turn's read-only tool calls as evidence (the newest ``MAX_INLINE_TOOL_CALLS`` of
        the task; older ones, and those past the turn's own cap, are counted) and emit a
        ``tool.called`` event for each. State and events only, no command: histories recorded
        before these records existed replay unchanged (their turn results carry none)."""
        state = self.task.state
        state.tool_calls.extend(result.tool_calls)
        state.tool_calls_dropped += result.tool_calls_dropped
        excess = len(state.tool_calls) - MAX_INLINE_TOOL_CALLS
        if excess > 0:
            del state.tool_calls[:excess]
            state.tool_calls_dropped += excess
        for record in result.tool_calls:
            self.task.emit(EventType.TOOL_CALLED, **record.model_dump(mode="json"))

    def check_carriable(self) -> None:
        """Hand off, explained, when the next run's input would be too large for Temporal to carry.

        Raises:
            HandOff: the state is over ``MAX_CARRIED_BYTES`` even with its older evidence archived.
        """
        state = self.task.state
        size = len(
            TaskInput(
                spec=self.task.valid_spec, state=state, release=self.task.input_release
            ).model_dump_json()
        )
        if size > MAX_CARRIED_BYTES:
            raise HandOff(
                f"the task's state is {size / 1e6:.2f} MB, more than the {MAX_CARRIED_BYTES / 1e6:.1f} MB "
                f"continue-as-new can carry ({len(state.follow_ups)} pending follow-ups, "
                f"{len(state.decisions)} decisions, {len(state.writes)} writes, "
                f"{len(state.commands)} inline commands)"
            )
