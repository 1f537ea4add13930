"""`agent-worker evidence` writes a self-contained bundle of a finished task; `agent-worker verify`
checks it against the artifact store, the bundle's own copies and the business system."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest
from agent_worker.activities.artifacts import LocalArtifactStore
from agent_worker.cli.evidence import expand, referenced
from agent_worker.cli.main import main as cli_main
from agent_worker.schemas.artifacts import ArtifactRef
from agent_worker.schemas.sandbox import CommandRecord
from agent_worker.schemas.tasks import Evidence, EvidenceArchive, TaskPhase, TaskResult

from tests.helpers.support import TaskEnv, example_spec


async def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the CLI in a thread (it runs its own event loop): (exit code, stdout, stderr)."""
    code = await asyncio.to_thread(cli_main, list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def approved_report(env: TaskEnv) -> TaskResult:
    """The monthly-report example, approved by finance-lead through the `decide` update."""
    handle = await env.start(example_spec())
    await env.approve(handle)
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED
    return result


@pytest.fixture
async def bundled(
    env: TaskEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[TaskResult, Path]:
    """A completed monthly report and its freshly written evidence bundle."""
    monkeypatch.setenv("AGENT_WORKER_DATA_DIR", str(env.config.data_dir))
    result = await approved_report(env)
    bundle = tmp_path / "bundle"
    code, out, err = await run(
        capsys, "--address", env.address, "evidence", result.task_id, "-o", str(bundle)
    )
    assert code == 0, err
    assert f"task {result.task_id} ended completed" in out
    return result, bundle


def blob(env: TaskEnv, digest: str) -> Path:
    hexdigest = digest.split(":", 1)[1]
    return env.config.artifact_dir / "sha256" / hexdigest[:2] / hexdigest[2:]


def item_lines(out: str) -> list[str]:
    """The per-item lines of `verify` (every line but the summary)."""
    return out.strip().splitlines()[:-1]


async def test_fresh_bundle_is_self_contained_and_verifies(
    env: TaskEnv, bundled: tuple[TaskResult, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The bundle's manifest carries the outcome, approval (principal, version) and confirmed write,
    holds a byte-exact copy of every referenced artifact, and `verify` passes with every line ok."""
    result, bundle = bundled
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["schema"] == "agent-worker.evidence/v1"
    assert (manifest["task_id"], manifest["phase"]) == (result.task_id, "completed")
    assert manifest["final_output"] == result.final_output and manifest["generated_at"]
    evidence = manifest["evidence"]
    [approval] = evidence["approvals"]
    assert approval["principal"] == "finance-lead"
    assert approval["version"] == result.evidence.approvals[0].version
    [write] = evidence["writes"]
    assert write["confirmed"] is True and write["receipt"]["outcome"] == "committed"
    [command] = evidence["commands"]
    digests = {a.digest for a in [*result.evidence.inputs, *result.evidence.artifacts]}
    digests |= {command["stdout_artifact"]["digest"], command["tool_output"]["digest"]}
    for digest in digests:
        copy = bundle / "artifacts" / digest.split(":", 1)[1]
        assert copy.read_bytes() == env.store().get(digest)

    code, out, _ = await run(capsys, "verify", str(bundle))
    assert code == 0, out
    lines = item_lines(out)
    assert all(line.startswith("ok  ") for line in lines), out
    assert f"ok  write {write['operation_key']}" in lines
    assert f"ok  artifact {result.evidence.artifacts[0].name}" in lines
    assert len([line for line in lines if line.startswith("ok  input ")]) == len(result.evidence.inputs)
    assert out.strip().splitlines()[-1].startswith("verified:")


async def test_artifact_altered_in_the_store_fails_verify(
    env: TaskEnv, bundled: tuple[TaskResult, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Overwriting the report's blob in the artifact store makes `verify` fail, naming that artifact."""
    result, bundle = bundled
    [report] = result.evidence.artifacts
    blob(env, report.digest).write_bytes(b"total: 1.00 (forged)\n")

    code, out, _ = await run(capsys, "verify", str(bundle))
    assert code == 1
    [failed] = [line for line in item_lines(out) if not line.startswith("ok  ")]
    assert failed.startswith(f"FAIL artifact {report.name}: altered in the store")
    assert out.strip().splitlines()[-1].startswith("NOT verified:")


async def test_deleted_business_record_fails_verify(
    env: TaskEnv, bundled: tuple[TaskResult, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Deleting the committed row from the business system makes `verify` fail, naming the write's
    operation key."""
    result, bundle = bundled
    [write] = result.evidence.writes
    with sqlite3.connect(env.config.business_db) as db:
        db.execute("DELETE FROM business_records")

    code, out, _ = await run(capsys, "verify", str(bundle))
    assert code == 1
    [failed] = [line for line in item_lines(out) if not line.startswith("ok  ")]
    assert failed == f"FAIL write {write.operation_key}: receipt not found in the business system"


async def test_copy_altered_inside_the_bundle_fails_verify(
    bundled: tuple[TaskResult, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Altering one input's copy inside the bundle makes `verify` fail, naming that input."""
    result, bundle = bundled
    sheet = result.evidence.inputs[0]
    (bundle / "artifacts" / sheet.digest.split(":", 1)[1]).write_bytes(b"month,amount\n01,0.00\n")

    code, out, _ = await run(capsys, "verify", str(bundle))
    assert code == 1
    [failed] = [line for line in item_lines(out) if not line.startswith("ok  ")]
    assert failed.startswith(f"FAIL input {sheet.name}: bundle copy altered")


async def test_items_the_evidence_lists_as_missing_are_unknown(
    bundled: tuple[TaskResult, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """An item the evidence itself lists as missing is reported UNKNOWN and makes `verify` fail."""
    _, bundle = bundled
    manifest_path = bundle / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["evidence"]["missing"] = ["write op-x not confirmed by lookup"]
    manifest_path.write_text(json.dumps(manifest))

    code, out, _ = await run(capsys, "verify", str(bundle))
    assert code == 1
    [unknown] = [line for line in item_lines(out) if not line.startswith("ok  ")]
    assert unknown.startswith("UNKNOWN missing write op-x not confirmed by lookup")


async def test_evidence_is_refused_for_unknown_and_running_tasks(
    env: TaskEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`evidence` refuses, with a clear message and no bundle, a task id that does not exist and a
    task still waiting for approval."""
    monkeypatch.setenv("AGENT_WORKER_DATA_DIR", str(env.config.data_dir))
    bundle = tmp_path / "bundle"
    code, _, err = await run(capsys, "--address", env.address, "evidence", "no-such-task", "-o", str(bundle))
    assert code == 1
    assert "no task 'no-such-task'" in err

    handle = await env.start(example_spec())
    await env.awaiting_approval(handle)
    code, _, err = await run(capsys, "--address", env.address, "evidence", handle.id, "-o", str(bundle))
    assert code == 1
    assert f"task {handle.id} is still running (awaiting_approval)" in err
    assert not bundle.exists()
    await env.cancel(handle)


def test_archived_parts_come_back_in_line_and_a_lost_part_is_named(tmp_path: Path) -> None:
    """``expand`` puts archived command records and artifacts before the inline ones, oldest part
    first; a part the store lacks is named, and what it held is not made up."""
    store = LocalArtifactStore(tmp_path / "artifacts")

    def command(n: int) -> CommandRecord:
        out = store.ref(f"call_{n}.stdout", f"{n}\n".encode())
        return CommandRecord(
            call_id=f"call_{n}",
            sandbox_id="sb",
            argv=["echo", str(n)],
            exit_code=0,
            duration_ms=1,
            stdout=f"{n}\n",
            stdout_artifact=out,
            stderr_artifact=out,
        )

    def part(number: int, *calls: int) -> ArtifactRef:
        archive = EvidenceArchive(task_id="t", part=number, commands=[command(n) for n in calls])
        return store.ref(f"evidence-{number:04d}.json", archive.model_dump_json(by_alias=True).encode())

    evidence = Evidence(inputs=[], artifacts=[], commands=[command(5)], approvals=[], writes=[],
                        archived=[part(1, 1, 2), part(2, 3, 4)])  # fmt: skip
    whole, problems = expand(evidence, store)
    assert problems == []
    assert [c.call_id for c in whole.commands] == [f"call_{n}" for n in range(1, 6)]
    assert [kind for kind, _, _ in referenced(whole)][:2] == ["archive", "archive"]

    lost = evidence.archived[0].model_copy(update={"digest": "sha256:" + "0" * 64})
    whole, problems = expand(evidence.model_copy(update={"archived": [lost, evidence.archived[1]]}), store)
    assert [c.call_id for c in whole.commands] == ["call_3", "call_4", "call_5"]
    [problem] = problems
    assert problem.startswith("archive evidence-0001.json: no artifact sha256:000")
