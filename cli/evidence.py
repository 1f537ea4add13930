"""Evidence bundles: ``evidence`` writes a closed task's evidence to a directory anyone can keep, and
``verify`` checks a bundle against the artifact store and the business system.

A bundle (schema ``agent-worker.evidence/v1``)::

    evidence-<task id>/
        manifest.json      the outcome (task id, phase, final output, reason), generated_at, the
                           task's ``Evidence`` as JSON, and ``files``: each referenced artifact's copy
        artifacts/<hex>    the bytes of every referenced artifact, named by its sha256 hex digest,
                           and the arguments and output of every recorded read-only tool call

``verify`` prints one line per item, ``ok``, ``FAIL`` (with why) or ``UNKNOWN`` (the evidence itself
lists it as missing), and exits 0 only when every item is ok.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import pydantic
from agent_worker.activities.errors import ArtifactCorrupt, ArtifactNotFound
from agent_worker.cli.context import CliContext
from agent_worker.cli.errors import CliError
from agent_worker.cli.tasks import INBOX_QUERY_TIMEOUT
from agent_worker.schemas.artifacts import ArtifactRef
from agent_worker.schemas.digests import digest_bytes
from agent_worker.schemas.tasks import Evidence, EvidenceArchive, TaskResult
from agent_worker.schemas.turns import ToolCallRecord
from agent_worker.schemas.writes import WriteEvidence, WriteOutcome
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

if TYPE_CHECKING:
    from agent_worker.activities.artifacts import ArtifactStore
    from agent_worker.activities.business import BusinessWriter
    from agent_worker.schemas.config import WorkerConfig

    from agent_worker.client import AgentWorkerClient

SCHEMA = "agent-worker.evidence/v1"
MANIFEST = "manifest.json"
COPIES = "artifacts"


def referenced(evidence: Evidence) -> Iterator[tuple[str, str, ArtifactRef]]:
    """Every artifact the evidence refers to, as ``(kind, name, ref)``; a digest may repeat."""
    for ref in evidence.archived:
        yield "archive", ref.name, ref
    for ref in evidence.inputs:
        yield "input", ref.name, ref
    for ref in evidence.artifacts:
        yield "artifact", ref.name, ref
    for command in evidence.commands:
        yield "command", command.stdout_artifact.name, command.stdout_artifact
        if command.stderr_artifact is not None:
            yield "command", command.stderr_artifact.name, command.stderr_artifact
        if command.tool_output is not None:
            yield "command", command.tool_output.name, command.tool_output
        for ref in command.outputs:
            yield "command", f"{command.call_id}/{ref.name}", ref


def tool_call_files(evidence: Evidence) -> Iterator[tuple[str, str, str]]:
    """Each tool call's stored parts, as ``(call, "arguments" | "output", digest)``: read-only calls
    and the calls of effect tools the agent brought (own functions, MCP tools)."""
    for call, parts in tool_calls(evidence).items():
        for part, digest in parts:
            yield call, part, digest


def tool_calls(evidence: Evidence) -> dict[str, list[tuple[str, str]]]:
    """Each tool call, by a readable name, with its stored parts ``(part, digest)``."""
    calls: dict[str, list[tuple[str, str]]] = {}
    for record in evidence.tool_calls:
        calls[_call_name(record)] = [("arguments", record.arguments_digest), ("output", record.output_digest)]
    for effect in evidence.tool_effects:
        name = f"{effect.tool} {effect.call_id} ({effect.source} tool, {effect.operation_key})"
        calls[name] = [("arguments", effect.arguments_digest), ("output", effect.output_digest)]
    return calls


def _call_name(record: ToolCallRecord) -> str:
    return f"{record.name} {record.call_id} (turn {record.turn})"


def _hex(digest: str) -> str:
    return digest.split(":", 1)[1]


async def fetch_result(tasks: AgentWorkerClient, task_id: str) -> TaskResult:
    """The closed task's ``TaskResult``.

    Raises:
        CliError: there is no such task, it is still running, or it ended without a result
            (cancelled, terminated, timed out, failed).
    """
    handle = tasks.handle(task_id)
    try:
        description = await handle.describe()
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:
            raise CliError(f"no task {task_id!r}") from None
        raise CliError(f"cannot reach task {task_id}: {err.message}") from None
    if description.status is WorkflowExecutionStatus.RUNNING:
        try:
            status = await tasks.status(task_id, wait_seconds=INBOX_QUERY_TIMEOUT.total_seconds())
            phase = status.phase.value
        except Exception:  # the phase only adorns the message; no worker may be answering
            phase = "running"
        raise CliError(f"task {task_id} is still running ({phase}); its evidence is final once it ends")
    if description.status is not WorkflowExecutionStatus.COMPLETED:
        ended = description.status.name.lower() if description.status else "unknown"
        raise CliError(f"task {task_id} ended {ended} without a result, so it has no evidence to bundle")
    return await handle.result()


def expand(evidence: Evidence, store: ArtifactStore) -> tuple[Evidence, list[str]]:
    """The evidence with its archived parts (older command records and artifact references, moved
    to the store at continue-as-new) put back in line before the inline ones.

    Returns:
        The whole evidence, and why each part that could not be read was not.
    """
    commands, artifacts, problems = [], [], []
    for ref in evidence.archived:
        try:
            part = EvidenceArchive.model_validate_json(store.get(ref.digest))
        except (ArtifactNotFound, ArtifactCorrupt, pydantic.ValidationError) as err:
            problems.append(f"archive {ref.name}: {err}; the commands and artifacts it holds are not listed")
            continue
        commands += part.commands
        artifacts += part.artifacts
    whole = evidence.model_copy(
        update={"commands": commands + evidence.commands, "artifacts": artifacts + evidence.artifacts}
    )
    return whole, problems


def write_bundle(result: TaskResult, directory: Path, store: ArtifactStore) -> tuple[Evidence, list[str]]:
    """Write the manifest (with the archived evidence back in line) and a verified copy of each
    referenced artifact into ``directory``.

    Returns:
        The whole evidence, and why each artifact that could not be copied was not (the store lacks
        it or it was altered); the manifest lists them under ``not_copied``.
    """
    copies = directory / COPIES
    copies.mkdir(parents=True, exist_ok=True)
    evidence, not_copied = expand(result.evidence, store)
    files = []
    for kind, name, ref in referenced(evidence):
        path = copies / _hex(ref.digest)
        files.append({"kind": kind, "name": name, "digest": ref.digest, "path": f"{COPIES}/{path.name}"})
        if path.exists():
            continue
        try:
            path.write_bytes(store.get(ref.digest))
        except (ArtifactNotFound, ArtifactCorrupt) as err:
            not_copied.append(f"{kind} {name}: {err}")
    for call, part, digest in tool_call_files(evidence):
        path = copies / _hex(digest)
        files.append(
            {
                "kind": "tool call",
                "name": f"{call} {part}",
                "digest": digest,
                "path": f"{COPIES}/{path.name}",
            }
        )
        if path.exists():
            continue
        try:
            path.write_bytes(store.get(digest))
        except (ArtifactNotFound, ArtifactCorrupt) as err:
            not_copied.append(f"tool call {call} {part}: {err}")
    manifest: dict[str, Any] = {
        "schema": SCHEMA,
        "task_id": result.task_id,
        "phase": result.phase.value,
        "final_output": result.final_output,
        "reason": result.reason,
        "generated_at": datetime.now(UTC).isoformat(),
        "evidence": evidence.model_dump(mode="json"),
        "usage": result.usage.model_dump(mode="json"),
        "files": files,
        "not_copied": not_copied,
    }
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return evidence, not_copied


def _summary(result: TaskResult, evidence: Evidence, directory: Path, not_copied: list[str]) -> list[str]:
    copies = list((directory / COPIES).iterdir())
    size = sum(p.stat().st_size for p in copies)
    lines = [
        f"task {result.task_id} ended {result.phase.value}" + (f": {result.reason}" if result.reason else ""),
        f"wrote {directory}: {MANIFEST} and {len(copies)} artifact copies ({size} bytes)",
        f"  inputs {len(evidence.inputs)}, artifacts {len(evidence.artifacts)}, commands "
        f"{len(evidence.commands)}, approvals {len(evidence.approvals)}, writes {len(evidence.writes)}, "
        f"delegations {len(evidence.delegations)}, read-only tool calls {len(evidence.tool_calls)}"
        + (f" ({len(evidence.archived)} archived parts back in line)" if evidence.archived else ""),
    ]
    lines += [
        f"  approval {d.request_id}: {d.decision.value} by {d.principal} on {d.version}"
        + (f" via grant {d.grant_id}" if d.grant_id else "")
        + (f" (remembered as {d.remembered_as})" if d.remembered_as else "")
        for d in evidence.approvals
    ]
    lines += [
        f"  write {w.operation_key}: {w.receipt.outcome.value} as {w.receipt.record_id}, confirmed by "
        f"lookup: {'yes' if w.confirmed else 'UNKNOWN' if w.confirmed is None else 'NO'}"
        for w in evidence.writes
    ]
    lines += [f"  MISSING: {m}" for m in evidence.missing]
    lines += [f"  NOT COPIED: {why}" for why in not_copied]
    lines.append(f"check it with: agent-worker verify {directory}")
    return lines


def _artifact_store(config: WorkerConfig) -> ArtifactStore:
    """The configured artifact store, its backend imported only when a command needs it."""
    from agent_worker.activities.stores.artifacts import build_artifact_store

    return build_artifact_store(config)


def _refuse_nonempty(directory: Path) -> None:
    # A bundle mixed with an older one's copies could not be told apart from it.
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise CliError(f"{directory} exists and is not an empty directory; choose another with -o", 2)


def register(sub: Any) -> None:
    """Add ``evidence`` and ``verify``."""
    evidence = sub.add_parser("evidence", help="write a closed task's evidence bundle (manifest + artifacts)")
    evidence.add_argument("task_id")
    evidence.add_argument("-o", "--output", type=Path, help="bundle directory (default: evidence-<task id>)")
    evidence.set_defaults(handler=cmd_evidence)

    verify = sub.add_parser("verify", help="check a bundle against the artifact store and business system")
    verify.add_argument("bundle", type=Path)
    verify.set_defaults(handler=cmd_verify)


async def cmd_evidence(args: Any, ctx: CliContext, out: TextIO | None = None) -> int:
    """``evidence TASK_ID [-o DIR]``: 0 when every referenced artifact was copied, else 1."""
    out = out or sys.stdout
    config = ctx.config
    directory: Path = args.output or Path("evidence-" + args.task_id.replace("/", "_"))
    await asyncio.to_thread(_refuse_nonempty, directory)
    result = await fetch_result(await ctx.tasks(), args.task_id)
    store = _artifact_store(config)
    try:
        evidence, not_copied = await asyncio.to_thread(write_bundle, result, directory, store)
    finally:
        store.close()
    print("\n".join(_summary(result, evidence, directory, not_copied)), file=out)
    return 1 if not_copied else 0


@dataclass
class Check:
    """The verdict on one item of a bundle."""

    verdict: str  # "ok", "FAIL" or "UNKNOWN"
    kind: str
    name: str
    why: str = ""

    def line(self) -> str:
        head = f"{self.verdict:<3} {self.kind} {self.name}"
        return f"{head}: {self.why}" if self.why else head


def check_artifact(kind: str, name: str, ref: ArtifactRef, store: ArtifactStore, copies: Path) -> Check:
    """The artifact must be in the store unaltered, and its bundle copy must hold the same bytes."""
    problems = []
    try:
        data = store.get(ref.digest)
        if len(data) != ref.size:
            problems.append(f"size differs (store {len(data)} B, evidence {ref.size} B)")
    except ArtifactNotFound:
        problems.append(f"missing from the store ({ref.digest})")
    except ArtifactCorrupt:
        problems.append(f"altered in the store: bytes no longer match {ref.digest}")
    copy = copies / _hex(ref.digest)
    if not copy.is_file():
        problems.append("missing from the bundle")
    elif digest_bytes(copy.read_bytes()) != ref.digest:
        problems.append(f"bundle copy altered: digest differs from {ref.digest}")
    return Check("FAIL" if problems else "ok", kind, name, "; ".join(problems))


def check_tool_call(call: str, parts: list[tuple[str, str]], store: ArtifactStore, copies: Path) -> Check:
    """A tool call's arguments and output must be in the store unaltered, and their bundle copies
    must hold the same bytes: what the record says the tool saw and answered."""
    problems = []
    for part, digest in parts:
        try:
            store.get(digest)
        except ArtifactNotFound:
            problems.append(f"{part} missing from the store ({digest})")
        except ArtifactCorrupt:
            problems.append(f"{part} altered in the store: bytes no longer match {digest}")
        copy = copies / _hex(digest)
        if not copy.is_file():
            problems.append(f"{part} missing from the bundle")
        elif digest_bytes(copy.read_bytes()) != digest:
            problems.append(f"{part} bundle copy altered: digest differs from {digest}")
    return Check("FAIL" if problems else "ok", "tool call", call, "; ".join(problems))


def check_write(write: WriteEvidence, writer: BusinessWriter | str) -> Check:
    """A committed receipt must be found by lookup with the same payload digest and record id; a
    rejected one must have committed nothing. ``writer`` is a string when it cannot be used (why)."""
    receipt, key = write.receipt, write.operation_key
    if receipt.outcome is WriteOutcome.UNKNOWN:
        return Check("UNKNOWN", "write", key, "the evidence records the outcome as unknown")
    if isinstance(writer, str):
        return Check("FAIL", "write", key, writer)
    try:
        found = writer.lookup(key)
    except Exception as err:  # any adapter's failure is this item's verdict, not verify's crash
        return Check("FAIL", "write", key, f"lookup failed: {err}")
    if found is not None and found.outcome is not WriteOutcome.COMMITTED:
        found = None
    if receipt.outcome is WriteOutcome.REJECTED:
        if found is not None:
            return Check(
                "FAIL", "write", key, f"rejected in the evidence, but committed as {found.record_id}"
            )
        return Check("ok", "write", key)
    if found is None:
        return Check("FAIL", "write", key, "receipt not found in the business system")
    if found.payload_digest != receipt.payload_digest:
        why = f"payload digest differs (business {found.payload_digest}, evidence {receipt.payload_digest})"
        return Check("FAIL", "write", key, why)
    if found.record_id != receipt.record_id:
        why = f"record id differs (business {found.record_id}, evidence {receipt.record_id})"
        return Check("FAIL", "write", key, why)
    return Check("ok", "write", key)


def _writer(config: WorkerConfig, system: str | None) -> BusinessWriter | str:
    """The writer of ``system`` (None: the default), or why it cannot be used."""
    # The whole worker: only `verify` of a bundle with writes needs it.
    from agent_worker.worker import build_systems, build_writer

    if system is not None:
        if system not in config.business_systems:
            return f"no business system named {system!r} is configured (AGENT_WORKER_BUSINESS_SYSTEMS)"
        return build_systems(config)[system]
    # Opening the embedded store creates it: a wrong data dir must fail, not verify an empty new file.
    embedded = not config.business_writer and config.business_backend == "sqlite"
    if embedded and not config.business_db.exists():
        return f"no business database at {config.business_db} (is AGENT_WORKER_DATA_DIR right?)"
    return build_writer(config)


def load_manifest(bundle: Path) -> dict[str, Any]:
    """The bundle's manifest, its evidence validated.

    Raises:
        CliError: (exit 2) no manifest, not JSON, another schema, or evidence that does not parse.
    """
    try:
        manifest = json.loads((bundle / MANIFEST).read_text())
    except OSError as err:
        raise CliError(f"{bundle}: no readable {MANIFEST} ({err.strerror})", 2) from None
    except json.JSONDecodeError as err:
        raise CliError(f"{bundle / MANIFEST}: not valid JSON ({err.msg}, line {err.lineno})", 2) from None
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise CliError(f"{bundle / MANIFEST}: not an {SCHEMA} manifest", 2)
    try:
        manifest["evidence"] = Evidence.model_validate(manifest.get("evidence"))
    except pydantic.ValidationError as err:
        raise CliError(f"{bundle / MANIFEST}: evidence does not parse: {err}", 2) from None
    return manifest


def verify_bundle(bundle: Path, config: WorkerConfig) -> list[Check]:
    """Every check of ``verify``, in manifest order."""
    evidence: Evidence = load_manifest(bundle)["evidence"]
    store = _artifact_store(config)
    try:
        checks = [check_artifact(*item, store, bundle / COPIES) for item in referenced(evidence)]
        checks += [
            check_tool_call(call, parts, store, bundle / COPIES)
            for call, parts in tool_calls(evidence).items()
        ]
    finally:
        store.close()
    writers: dict[str | None, BusinessWriter | str] = {}
    for write in evidence.writes:
        if write.system not in writers:
            writers[write.system] = _writer(config, write.system)
        checks.append(check_write(write, writers[write.system]))
    checks += [Check("UNKNOWN", "missing", m, "listed as missing by the evidence") for m in evidence.missing]
    return checks


def cmd_verify(args: Any, ctx: CliContext, out: TextIO | None = None) -> int:
    """``verify BUNDLE``: 0 when every item holds, 1 otherwise."""
    out = out or sys.stdout
    checks = verify_bundle(args.bundle, ctx.config)
    for check in checks:
        print(check.line(), file=out)
    counts = {v: sum(c.verdict == v for c in checks) for v in ("ok", "FAIL", "UNKNOWN")}
    holds = counts["ok"] == len(checks)
    print(
        f"{'verified' if holds else 'NOT verified'}: {len(checks)} items, {counts['ok']} ok, "
        f"{counts['FAIL']} failed, {counts['UNKNOWN']} unknown",
        file=out,
    )
    return 0 if holds else 1
