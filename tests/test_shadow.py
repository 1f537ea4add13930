"""``agent-worker shadow``: a candidate agent replayed on real, recorded tasks, with no business write.

The recorded tasks are real runs of the ``recorder`` agent on the dev server (a sandbox command,
then a write that needs finance's approval); the candidate (``tests.helpers.shadow_agents``) writes
other values for five of them. Everything runs on a real worker: the ``ShadowRun`` workflow, its
``ShadowTask`` children, the candidate's turns and the sandbox commands.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from agent_worker.activities.shadow import ShadowActivities
from agent_worker.activities.stores.artifacts import build_artifact_store
from agent_worker.cli.main import main as cli_main
from agent_worker.cli.shadow_record import NotRecordable, read_recorded_task
from agent_worker.schemas.actions import ActionResult, ActionStatus
from agent_worker.schemas.config import EXAMPLE_AGENT
from agent_worker.schemas.tasks import MIN_EVENTS_BEFORE_WAIT, TaskPhase
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.client import Client

from tests.helpers.openai_stub import OpenAIStub
from tests.helpers.shadow_agents import DIVERGING, SCORE_LOG_ENV
from tests.helpers.support import (
    DevServer,
    TaskEnv,
    assert_replays,
    decision,
    example_spec,
    make_config,
    run_ids,
    running_worker,
)

CANDIDATE = "tests.helpers.shadow_agents:candidate"
SCORER = "tests.helpers.shadow_agents:score"
RULES = [{"tool": "record_value", "decision": "require_approval", "approvers": ["finance-lead"]}]
# Activities that would reach the business system: a shadow run schedules none of them.
EFFECTS = {"business.write", "business.lookup", "tool.call", "mcp.call", "authz.check"}


def item_spec(item: str) -> dict[str, Any]:
    """A recorder task: a sandbox command writing a file, then the write of ``item``."""
    prompt = f"first run: echo {item} > note.txt && cat note.txt; then record: {item}"
    return {"agent": "recorder", "prompt": prompt, "policy": {"rules": RULES}}


async def record_tasks(env: TaskEnv, items: list[str]) -> dict[str, str]:
    """Run one real task per item, each approved by finance: item -> task id."""
    handles = {
        item: await env.start(item_spec(item), task_id=f"rec-{item}-{env.task_queue}") for item in items
    }
    for handle in handles.values():
        await env.approve(handle)
    for handle in handles.values():
        result = await asyncio.wait_for(handle.result(), 120)
        assert result.phase is TaskPhase.COMPLETED, result.reason
    return {item: handle.id for item, handle in handles.items()}


async def shadow(capsys: pytest.CaptureFixture[str], env: TaskEnv, *argv: str) -> tuple[int, str, str]:
    """``agent-worker --address ... shadow ARGV``: exit code, stdout, stderr."""
    capsys.readouterr()
    code = await asyncio.to_thread(cli_main, ["--address", env.address, "shadow", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def cli_env(env: TaskEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TaskEnv:
    """The CLI reads the env's configuration (its task queue and artifact store), and the scorer
    logs each task it scores."""
    monkeypatch.setenv("AGENT_WORKER_DATA_DIR", str(env.config.data_dir))
    monkeypatch.setenv("AGENT_WORKER_TASK_QUEUE", env.task_queue)
    monkeypatch.setenv(SCORE_LOG_ENV, str(tmp_path / "scored.log"))
    return env


async def export_runs(env: TaskEnv, task_id: str, prefix: Path) -> dict[str, str]:
    """Write each run of the task (it continued as new before its approval) to ``PREFIX-N.json``, as
    `temporal workflow show -o json --run-id` would: file name -> task id, for workflow_ids.json."""
    names = {}
    for n, run_id in enumerate(await run_ids(env.client, task_id), start=1):
        history = await env.client.get_workflow_handle(task_id, run_id=run_id).fetch_history()
        path = prefix.with_name(f"{prefix.name}-{n}.json")
        path.write_text(history.to_json())
        names[path.stem] = task_id
    return names


def max_open_children(history: dict[str, Any]) -> int:
    """The most child workflows a parent's history shows running at once."""
    open_now = peak = 0
    for event in history["events"]:
        kind = event["eventType"]
        if kind == "EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED":
            open_now += 1
            peak = max(peak, open_now)
        elif kind.startswith("EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_") and kind != (
            "EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED"
        ):
            open_now -= 1
    return peak


def activity_names(history: dict[str, Any]) -> set[str]:
    return {
        e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for e in history["events"]
        if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"
    }


async def test_shadow_of_20_recorded_tasks_names_exactly_the_diverged_ones_and_writes_nothing(
    cli_env: TaskEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """20 approved recorder tasks are replayed with a candidate that changes the write's value for 5
    of them: the report names exactly those 5 as diverged (their write is different and not
    executed, the recorded one missing); the other 15 get their recorded approval and receipt back
    and answer exactly as recorded. The business store still holds the 20 recorded rows and no
    shadow workflow scheduled an activity that reaches it; each recorded sandbox command ran again
    in a shadow sandbox; cost, model calls and time are reported beside the recorded ones; the
    scorer callable scored each task once; at most 4 tasks (--concurrency) ran at a time."""
    env = cli_env
    items = [f"item-{n:02d}" for n in range(20)]
    ids = await record_tasks(env, items)
    assert env.business().count() == 20
    tasks_file = tmp_path / "tasks.txt"
    tasks_file.write_text("\n".join(ids.values()) + "\n")
    out_dir = tmp_path / "report"
    shadow_id = f"shadow-{env.task_queue}"

    code, out, err = await shadow(
        capsys, env, "--agent", "recorder", "--candidate", CANDIDATE, "--tasks", str(tasks_file),
        "--scorer", SCORER, "--concurrency", "4", "--id", shadow_id, "--out", str(out_dir),
    )  # fmt: skip

    assert code == 0, err
    assert env.business().count() == 20  # nothing written by the shadow run
    report = json.loads((out_dir / "shadow-report.json").read_text())
    summary = report["summary"]
    diverged = sorted(ids[item] for item in DIVERGING)
    assert summary["diverged_tasks"] == diverged
    assert (summary["tasks"], summary["diverged"], summary["failed"]) == (20, 5, 0)
    assert (summary["same_actions"], summary["different_actions"], summary["missing_actions"]) == (35, 5, 5)
    assert (summary["writes_proposed"], summary["writes_executed"]) == (20, 0)
    assert summary["exact_matches"] == 15 and summary["scored"] == 20 and summary["mean_score"] == 0.75
    tasks = {t["task_id"]: t for t in report["tasks"]}
    for item, task_id in ids.items():
        task = tasks[task_id]
        shell, write = task["actions"]
        assert shell["tool"] == "run_shell" and shell["match"] == "same"
        assert shell["outcome"] == "ran in the shadow sandbox (recorded: executed)"
        assert task["model_calls"] == 2 and task["recorded_model_calls"] == 2
        assert isinstance(task["cost_usd"], float) and isinstance(task["recorded_cost_usd"], float)
        assert task["active_seconds"] > 0 and task["recorded_active_seconds"] > 0
        if item in DIVERGING:
            assert write["match"] == "different" and write["arguments"] == {"value": f"{item}-v2"}
            assert write["outcome"] == "diverged: not executed" and write["status"] == "rejected"
            assert task["diverged"] and not task["exact_match"] and task["score"]["score"] == 0.0
            assert task["final_output"].startswith("not recorded: shadow run: not executed")
        else:
            assert write["match"] == "same" and write["outcome"] == "answered from the record (executed)"
            assert not task["diverged"] and task["exact_match"] and task["score"]["score"] == 1.0
            assert task["final_output"] == task["recorded_final_output"]
            assert task["final_output"].startswith("recorded as ")
    for key in ("cost_usd", "recorded_cost_usd", "active_seconds", "recorded_active_seconds"):
        assert isinstance(summary[key], float)
    scored = Counter((tmp_path / "scored.log").read_text().split())
    assert scored == Counter(ids.values())  # each task scored exactly once
    markdown = (out_dir / "shadow-report.md").read_text()
    assert all(f"`{task_id}`" in markdown for task_id in diverged)
    assert "| diverged | 5 |" in markdown and "| business writes proposed / executed | 20 / 0 |" in markdown
    assert "20 tasks: 5 diverged, 0 failed" in out and all(f"diverged: {t}" in out for t in diverged)

    parent = json.loads(await assert_replays(env.client, shadow_id))
    assert max_open_children(parent) == 4
    for task_id in ids.values():
        handle = env.client.get_workflow_handle(f"{shadow_id}/{task_id}")
        child = json.loads((await handle.fetch_history()).to_json())
        names = activity_names(child)
        assert not names & EFFECTS and {"shadow.turn", "sandbox.exec", "shadow.score"} <= names


async def test_shadow_from_exported_histories_for_ci_fails_on_divergence(
    cli_env: TaskEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exported history files (as `temporal workflow show -o json` writes them, one a run: each task
    continued as new before its approval) are replayed just as tasks read from the cluster are,
    other agents' histories skipped, a task exported twice replayed once; with --fail-on-diverge
    the command exits 1 when a task diverged, and 0 when none did, also on another deployment with
    an artifact store of its own (a CI job's)."""
    env = cli_env
    ids = await record_tasks(env, ["item-03", "item-04"])
    exported = tmp_path / "exported"
    exported.mkdir()
    index = {}
    for item, task_id in ids.items():
        index |= await export_runs(env, task_id, exported / item)
    # The same task exported twice (as a reused id, or two exports of one task, would list it) is
    # replayed once.
    for path in exported.glob("item-04-*.json"):
        (exported / f"again-{path.name}").write_text(path.read_text())
        index[f"again-{path.stem}"] = ids["item-04"]
    (exported / "workflow_ids.json").write_text(json.dumps(index))
    other = await env.start({"agent": "shell", "prompt": "run: echo hi"})
    await asyncio.wait_for(other.result(), 60)
    (exported / "other.json").write_text((await other.fetch_history()).to_json())

    code, out, err = await shadow(
        capsys, env, "--agent", "recorder", "--candidate", CANDIDATE, "--histories", str(exported),
        "--fail-on-diverge", "--id", f"shadow-ci-{env.task_queue}", "--out", str(tmp_path / "r1"),
    )  # fmt: skip
    assert code == 1, err
    report = json.loads((tmp_path / "r1" / "shadow-report.json").read_text())
    assert report["summary"]["tasks"] == 2 and report["summary"]["diverged_tasks"] == [ids["item-03"]]
    await assert_replays(env.client, f"shadow-ci-{env.task_queue}/{ids['item-04']}")

    # CI: another deployment (its own queue, worker and artifact store) replays the committed file.
    for path in exported.glob("item-03-*.json"):
        path.unlink()
    ci = make_config(tmp_path / "ci-data")
    monkeypatch.setenv("AGENT_WORKER_DATA_DIR", str(ci.data_dir))
    monkeypatch.setenv("AGENT_WORKER_TASK_QUEUE", ci.task_queue)
    async with running_worker(env.client, ci):
        code, out, err = await shadow(
            capsys, env, "--agent", "recorder", "--candidate", CANDIDATE, "--histories", str(exported),
            "--fail-on-diverge", "--id", f"shadow-ci2-{ci.task_queue}", "--out", str(tmp_path / "r2"),
        )  # fmt: skip
    assert code == 0, err
    assert "1 tasks: 0 diverged" in out and "exact answers 1" in out
    # A recorded output this store lacks reaches the candidate as the history's text, with a note.
    lacking = ActionResult(
        call_id="c",
        tool="run_shell",
        status=ActionStatus.EXECUTED,
        output="",
        output_ref="sha256:" + "0" * 64,
    )
    readable = ShadowActivities(build_artifact_store(ci), ci)._readable(lacking)
    assert readable.output_ref is None and "is not in this artifact store" in readable.output


async def test_the_documented_example_replays_the_monthly_report_with_every_action_the_same(
    cli_env: TaskEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/shadow.md's example: the bundled monthly report, approved and filed, replayed with its own
    agent as the candidate and the bundled scorer: its sandbox commands run again in a shadow sandbox
    (making the same report, so the filing has the recorded version), the approval and the receipt
    come from the record, nothing diverges, the answer is the recorded one, and no row is added."""
    env = cli_env
    handle = await env.start(example_spec(), task_id=f"report-{env.task_queue}")
    await env.approve(handle)
    result = await asyncio.wait_for(handle.result(), 120)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert env.business().count() == 1

    # The docs' command, with --limit 1: the test server holds every other test's monthly reports
    # of the last hour too, and the cluster lists the task that closed last (this one) first.
    code, out, err = await shadow(
        capsys, env, "--agent", "monthly-report", "--candidate", EXAMPLE_AGENT, "--since", "1h",
        "--scorer", "agent_worker.examples.shadow_scorer:same_answer", "--out", str(tmp_path / "report"),
        "--limit", "1",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads((tmp_path / "report" / "shadow-report.json").read_text())
    [task] = [t for t in report["tasks"] if t["task_id"] == handle.id]
    assert not task["diverged"] and task["different_actions"] == 0 and task["missing_actions"] == 0
    assert task["exact_match"] and task["score"]["score"] == 1.0
    outcomes = {a["tool"]: a["outcome"] for a in task["actions"]}
    assert outcomes["submit_report"] == "answered from the record (executed)"
    assert any(o == "ran in the shadow sandbox (recorded: executed)" for o in outcomes.values())
    assert env.business().count() == 1


async def test_model_replaces_the_candidate_s_model_and_cost_is_reported_against_the_original(
    client: Client, dev_server: DevServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """With a real provider (an OpenAI-shaped HTTP server on loopback) and prices configured, a task
    recorded on the worker's model is replayed with ``--model gpt-candidate``: the candidate's model
    calls name that model, the candidate is found by the recorded agent's name in a list of
    registrations, and the report gives its cost beside the original's, both real figures."""
    with OpenAIStub() as stub:
        stub.always(text="hello there")
        config = make_config(
            tmp_path / "data", **stub.settings(), price_input_per_mtok=20.0, price_output_per_mtok=40.0
        )
        env = TaskEnv(client=client, config=config, address=dev_server.address)
        monkeypatch.setenv("AGENT_WORKER_DATA_DIR", str(config.data_dir))
        monkeypatch.setenv("AGENT_WORKER_TASK_QUEUE", config.task_queue)
        async with running_worker(client, config):
            handle = await env.start({"agent": "plain", "prompt": "say hello"})
            recorded = await asyncio.wait_for(handle.result(), 60)
            assert recorded.phase is TaskPhase.COMPLETED and recorded.usage.cost_usd > 0
            assert {r.body["model"] for r in stub.requests} == {"gpt-test"}
            tasks_file = tmp_path / "tasks.txt"
            tasks_file.write_text(handle.id)
            code, out, err = await shadow(
                capsys, env, "--agent", "plain", "--candidate", "tests.helpers.agents:registrations",
                "--model", "gpt-candidate", "--tasks", str(tasks_file), "--out", str(tmp_path / "report"),
            )  # fmt: skip
        assert code == 0, err
        assert stub.requests[-1].body["model"] == "gpt-candidate"
    report = json.loads((tmp_path / "report" / "shadow-report.json").read_text())
    [task] = report["tasks"]
    assert report["model"] == "gpt-candidate" and task["exact_match"] and not task["diverged"]
    assert task["recorded_cost_usd"] == pytest.approx(recorded.usage.cost_usd)
    assert task["cost_usd"] == pytest.approx(recorded.usage.cost_usd)  # the same calls, the same prices
    assert report["summary"]["cost_usd"] == pytest.approx(task["cost_usd"]) and task["cost_usd"] > 0
    assert f"cost ${task['cost_usd']:.4f} (recorded ${task['recorded_cost_usd']:.4f})" in out


async def test_recorded_rejections_and_edits_answer_the_candidate_s_matching_proposals(
    cli_env: TaskEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A recorded write that finance rejected, and one finance edited, are answered from those
    decisions when the candidate proposes the same version: the rejection's message and the edited
    write's receipt reach the candidate, its answers are the recorded ones, nobody is asked again
    and nothing is written."""
    env = cli_env
    decisions = {
        "item-00": {"kind": "reject", "reason": "not this month"},
        "item-01": {"kind": "edit", "edited_args": {"value": "item-01-fixed"}},
    }
    ids = {}
    for item, how in decisions.items():
        handle = await env.start(item_spec(item), task_id=f"rec-{item}-{env.task_queue}")
        [request] = (await env.awaiting_approval(handle)).pending
        fields = {k: v for k, v in how.items() if k != "kind"}
        outcome = await handle.execute_update(
            AgentTaskWorkflow.decide, decision(request, str(how["kind"]), "finance-lead", **fields)
        )
        assert outcome.accepted
        await asyncio.wait_for(handle.result(), 60)
        ids[item] = handle.id
    rows = env.business().count()
    tasks_file = tmp_path / "tasks.txt"
    tasks_file.write_text("\n".join(ids.values()))

    code, out, err = await shadow(
        capsys, env, "--agent", "recorder", "--candidate", CANDIDATE, "--tasks", str(tasks_file),
        "--out", str(tmp_path / "report"),
    )  # fmt: skip
    assert code == 0, err
    tasks = {
        t["task_id"]: t for t in json.loads((tmp_path / "report" / "shadow-report.json").read_text())["tasks"]
    }
    rejected, edited = tasks[ids["item-00"]], tasks[ids["item-01"]]
    assert rejected["actions"][1]["outcome"] == "answered from the record (rejected)"
    assert "not this month" in rejected["final_output"]
    assert edited["actions"][1]["outcome"] == "answered from the record (edited)"
    assert edited["actions"][1]["recorded"]["edited_arguments"] == {"value": "item-01-fixed"}
    for task in (rejected, edited):
        assert not task["diverged"] and task["exact_match"]
    assert env.business().count() == rows


async def test_a_task_that_continued_as_new_before_its_approval_is_replayed_from_all_its_runs(
    cli_env: TaskEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A recorder task that continued as new just before it waited for finance (its command and
    write proposed in the first run, the write approved and made in the second) is read whole, from
    the cluster (--tasks) and from its two runs' exported files: both actions are the same as
    recorded, the write answered from the record with the second run's receipt, nothing diverges and
    nothing is written; its first run alone is not a task to replay."""
    env = cli_env
    spec = {**item_spec("item-20"), "continue_as_new_before_wait": MIN_EVENTS_BEFORE_WAIT}
    handle = await env.start(spec, task_id=f"rec-chain-{env.task_queue}")
    await env.approve(handle)
    result = await asyncio.wait_for(handle.result(), 120)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    first, last = await run_ids(env.client, handle.id)
    runs = [await env.client.get_workflow_handle(handle.id, run_id=r).fetch_history() for r in (first, last)]
    assert runs[0].events[-1].HasField("workflow_execution_continued_as_new_event_attributes")
    assert env.business().count() == 1
    exported = tmp_path / "exported"
    exported.mkdir()
    for name, history in zip(("first", "last"), runs, strict=True):
        (exported / f"{name}.json").write_text(history.to_json())
    (exported / "workflow_ids.json").write_text(json.dumps({"first": handle.id, "last": handle.id}))
    tasks_file = tmp_path / "tasks.txt"
    tasks_file.write_text(handle.id)

    for source, path in (("--tasks", tasks_file), ("--histories", exported)):
        out_dir = tmp_path / source.strip("-")
        code, out, err = await shadow(
            capsys, env, "--agent", "recorder", "--candidate", CANDIDATE, source, str(path),
            "--fail-on-diverge", "--id", f"shadow-chain{source}-{env.task_queue}", "--out", str(out_dir),
        )  # fmt: skip
        assert code == 0, (source, out, err)
        [task] = json.loads((out_dir / "shadow-report.json").read_text())["tasks"]
        assert task["task_id"] == handle.id and not task["diverged"] and task["exact_match"], source
        shell, write = task["actions"]
        assert shell["tool"] == "run_shell" and shell["match"] == "same", source
        assert shell["outcome"] == "ran in the shadow sandbox (recorded: executed)", source
        assert write["tool"] == "record_value" and write["match"] == "same", source
        assert write["outcome"] == "answered from the record (executed)", source
        assert write["recorded"]["status"] == "executed", source
        assert (task["different_actions"], task["missing_actions"]) == (0, 0), source
    assert env.business().count() == 1

    recorded = await read_recorded_task(runs, env.client.data_converter)
    assert recorded.run_id == first and [a.tool for a in recorded.actions] == ["run_shell", "record_value"]
    with pytest.raises(NotRecordable, match="continued as new"):
        await read_recorded_task(runs[0], env.client.data_converter)
