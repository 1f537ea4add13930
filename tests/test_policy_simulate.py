"""`agent-worker policy simulate`: a candidate policy run over recorded task histories (from the dev
server and from files) reports, per action, the recorded decision and the candidate's, exactly as the
workflow decides, with no model call, no write and nothing started on the server; a bad candidate is
refused naming the rule."""

from __future__ import annotations

import asyncio
import base64
import glob
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from agent_worker.activities.agent import ConversationModel
from agent_worker.activities.events import JsonlEventSink
from agent_worker.cli.main import main as cli_main
from agent_worker.schemas.tasks import MIN_EVENTS_BEFORE_WAIT, TaskPhase

from tests.helpers.histories import chain_files
from tests.helpers.history_variants import with_arguments
from tests.helpers.support import REPO, TaskEnv, run_ids

HISTORIES = REPO / "tests" / "histories"


# The running policy of the recorded tasks: secrets denied, small values allowed, the rest asked.
RUNNING_RULES = [
    {
        "tool": "record_value",
        "when": 'args.value.startsWith("secret-")',
        "decision": "deny",
        "reason": "secret values are never recorded",
    },
    {"tool": "record_value", "when": "int(args.value) <= 1000", "decision": "allow", "reason": "small"},
    {"tool": "record_value", "decision": "require_approval", "approvers": ["finance-lead"]},
]

# The candidate, in YAML: secrets go to security, the allowance grows, the CFO takes large values and
# huge ones are refused.
CANDIDATE = """\
# a candidate policy: the `policy` of a TaskSpec
default_approvers: [finance-lead]
rules:
  - tool: record_value
    when: 'args.value.startsWith("secret-")'
    decision: require_approval
    approvers: [security]
  - tool: record_value
    when: int(args.value) <= 2500
    decision: allow
  - tool: record_value
    when: int(args.value) > 20000
    decision: deny
    reason: over the limit
  - tool: record_value
    decision: require_approval
    approvers: [cfo]
"""

# Each recorded run's value, and the values of its copies (decided as the run was, by RUNNING_RULES).
VALUES = {
    "50": ["1", "7", "12", "99", "100", "250", "500", "640", "777", "800", "900", "950", "999", "1000", "3"],
    "5000": ["1001", "1500", "2000", "2500", "2501", "3000", "7500", "10000", "15000", "20000", "20001"]
    + ["25000", "50000", "99999", "123456", "1000000"],
    "secret-42": [f"secret-{i}" for i in range(16)],
}


def expected(value: str) -> tuple[tuple[str, tuple[str, ...]], tuple[str, tuple[str, ...]]]:
    """(recorded, candidate) as (verdict, approvers), worked out by hand from the two policies."""
    if value.startswith("secret-"):
        return ("deny", ()), ("require_approval", ("security",))
    amount = int(value)
    recorded = ("allow", ()) if amount <= 1000 else ("require_approval", ("finance-lead",))
    if amount <= 2500:
        return recorded, ("allow", ())
    return recorded, ("deny", ()) if amount > 20000 else ("require_approval", ("cfo",))


def start_payload(history: dict[str, Any]) -> dict[str, Any]:
    """The task input's payload in a history's JSON (its first event)."""
    return history["events"][0]["workflowExecutionStartedEventAttributes"]["input"]["payloads"][0]


def decided(env: TaskEnv, task_id: str) -> list[tuple[str, str]]:
    """The task's ``policy.decided`` events (verdict, reason), as the worker recorded them."""
    events = JsonlEventSink(env.config.events_dir).read(task_id)
    return [(e.data["verdict"], e.data["reason"]) for e in events if e.type.value == "policy.decided"]


async def simulate(
    capsys: pytest.CaptureFixture[str], *argv: str, address: str = "127.0.0.1:1"
) -> tuple[int, str, str]:
    """Run ``agent-worker --address ADDRESS policy simulate ARGV``: its exit code, stdout and stderr
    (by default at an address where no server listens: reading files needs none)."""
    capsys.readouterr()
    code = await asyncio.to_thread(cli_main, ["--address", address, "policy", "simulate", *argv])
    out, err = capsys.readouterr()
    return code, out, err


async def record_tasks(env: TaskEnv) -> dict[str, str]:
    """Run one real task per recorded value (approving the one that asks): value -> task id."""
    ids = {}
    for value in VALUES:
        spec = {"agent": "recorder", "prompt": f"record: {value}", "policy": {"rules": RUNNING_RULES}}
        handle = await env.start(spec, task_id=f"sim-{value}-{env.task_queue}")
        if value == "5000":
            await env.approve(handle, "finance-lead")
        result = await asyncio.wait_for(handle.result(), 60)
        assert result.phase is TaskPhase.COMPLETED, result.reason
        ids[value] = handle.id
    return ids


async def test_simulate_over_50_recorded_histories_prints_the_diff_without_a_model_call_or_a_write(
    env: TaskEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three real tasks run on the dev server; the candidate is simulated over them from the server
    (--since, --query), where each recorded decision is the worker's own policy.decided event, and over
    50 exported tasks (the three and 47 copies with other arguments; the one finance approved
    continued as new before it waited, so each of its copies is two files, one a run), where every
    action's recorded and candidate decision is the one worked out by hand. Meanwhile any model call
    fails, and the business store, the runs on the queue and their histories stay as they were."""
    ids = await record_tasks(env)
    chains = {v: await run_ids(env.client, i) for v, i in ids.items()}
    assert [len(chains[v]) for v in VALUES] == [1, 2, 1]
    histories = {
        v: [json.loads((await env.client.get_workflow_handle(ids[v], run_id=r).fetch_history()).to_json())
            for r in runs]
        for v, runs in chains.items()
    }  # fmt: skip
    files = tmp_path / "histories"
    files.mkdir()
    index = {}
    for value, runs in histories.items():
        for n, other in enumerate([value, *VALUES[value]]):
            for k, run in enumerate(runs, start=1):
                try:
                    run = with_arguments(run, "record_value", {"value": other})
                except ValueError:
                    pass  # the run that waited for finance: it proposed nothing
                (files / f"{value}-{n:02d}-{k}.json").write_text(json.dumps(run))
                index[f"{value}-{n:02d}-{k}"] = f"{value}-{n:02d}"
    (files / "workflow_ids.json").write_text(json.dumps(index))
    assert len(set(index.values())) == 50 and len(list(files.glob("*-*.json"))) == 67
    policy = tmp_path / "candidate.yaml"
    policy.write_text(CANDIDATE)

    model_calls: list[str] = []

    async def no_model(self: ConversationModel, *args: Any, **kwargs: Any) -> Any:
        model_calls.append(type(self).__name__)
        raise AssertionError("policy simulate called a model")

    monkeypatch.setattr(ConversationModel, "get_response", no_model)
    writes = env.business().count()
    on_queue = f"TaskQueue = '{env.task_queue}'"
    runs = (await env.client.count_workflows(on_queue)).count
    lengths = {i: len((await env.client.get_workflow_handle(i).fetch_history()).events) for i in ids.values()}

    code, out, err = await simulate(
        capsys, "--policy", str(policy), "--query", on_queue, "--since", "1d", "--json", address=env.address
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["summary"]["runs"] == 3 and report["summary"]["inconsistent"] == 0
    by_task = {a["workflow_id"]: a for a in report["actions"]}
    for value, task_id in ids.items():
        action = by_task[task_id]
        assert [(action["recorded"]["verdict"], action["recorded"]["reason"])] == decided(env, task_id)
        recorded, candidate = expected(value)
        assert (action["recorded"]["verdict"], tuple(action["recorded"]["approvers"])) == recorded
        assert (action["candidate"]["verdict"], tuple(action["candidate"]["approvers"])) == candidate
    assert by_task[ids["secret-42"]]["outcome"] == "denied" and by_task[ids["5000"]]["outcome"] == "executed"

    code, out, err = await simulate(capsys, "--policy", str(policy), str(files))
    assert code == 0, err
    assert "50 runs, 50 actions: 34 would change (0 runs skipped, 0 actions inconsistent" in out
    line = next(row for row in out.splitlines() if row.startswith("deny -> require_approval"))
    assert "secret-" in line and "denied" in line and "require_approval by security" in line
    assert "deny: secret values are never recorded" in line
    line = next(row for row in out.splitlines() if row.startswith("approvers changed"))
    assert line.split()[-5:] == ["by", "finance-lead", "require_approval", "by", "cfo"]

    code, out, err = await simulate(capsys, "--policy", str(policy), str(files), "--json", "--fail-on-change")
    assert code == 1, err
    report = json.loads(out)
    seen = {}
    for action in report["actions"]:
        value = action["arguments"]["value"]
        seen[value] = (
            (action["recorded"]["verdict"], tuple(action["recorded"]["approvers"])),
            (action["candidate"]["verdict"], tuple(action["candidate"]["approvers"])),
        )
    assert seen == {v: expected(v) for value, others in VALUES.items() for v in [value, *others]}
    assert report["summary"]["by_kind"] == {
        "deny -> require_approval": 17,
        "approvers changed": 7,
        "require_approval -> deny": 6,
        "require_approval -> allow": 4,
    }
    assert report["summary"]["matrix"]["allow"] == {"allow": 16, "require_approval": 0, "deny": 0}
    print(f"simulated 50 histories in {report['elapsed_seconds']} s")

    assert model_calls == [] and env.business().count() == writes
    assert (await env.client.count_workflows(on_queue)).count == runs == 4  # 3 tasks, one in 2 runs
    for task_id, length in lengths.items():
        assert len((await env.client.get_workflow_handle(task_id).fetch_history()).events) == length


async def test_a_write_approved_after_its_task_continued_as_new_has_its_outcome_from_the_later_run(
    env: TaskEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A task that continued as new just before it waited for finance (its write proposed in the
    first run, approved and made in the second) is simulated as one task, from the server and from
    its two runs' files: the write's outcome is the second run's (executed, not undecided), its
    recorded decision finance-lead's approval, and the first run is not listed on its own. The first
    run's file alone is read as far as it goes: the write undecided."""
    spec = {"agent": "recorder", "prompt": "record: 5000", "policy": {"rules": RUNNING_RULES}}
    handle = await env.start(
        {**spec, "continue_as_new_before_wait": MIN_EVENTS_BEFORE_WAIT}, task_id=f"sim-chain-{env.task_queue}"
    )
    await env.approve(handle, "finance-lead")
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    first, last = await run_ids(env.client, handle.id)
    files = tmp_path / "histories"
    files.mkdir()
    for name, run_id in (("first", first), ("last", last)):
        history = await env.client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        (files / f"{name}.json").write_text(history.to_json())
    (files / "workflow_ids.json").write_text(json.dumps({"first": handle.id, "last": handle.id}))
    policy = tmp_path / "candidate.yaml"
    policy.write_text(CANDIDATE)

    server = ("--query", f"WorkflowId = '{handle.id}'", "--since", "1d")
    for source in (server, (str(files),)):
        code, out, err = await simulate(
            capsys, "--policy", str(policy), *source, "--json", address=env.address
        )
        assert code == 0, err
        report = json.loads(out)
        assert (report["summary"]["runs"], report["summary"]["skipped"]) == (1, 0), source
        [action] = report["actions"]
        assert (action["workflow_id"], action["run_id"]) == (handle.id, first), source
        assert action["tool"] == "record_value" and action["outcome"] == "executed", source
        assert action["recorded"]["verdict"] == "require_approval", source
        assert action["recorded"]["approvers"] == ["finance-lead"] and not action["inconsistent"], source

    code, out, err = await simulate(capsys, "--policy", str(policy), str(files / "first.json"), "--json")
    assert code == 0, err
    [action] = json.loads(out)["actions"]
    assert action["outcome"] == "undecided" and action["run_id"] == first


BAD_CANDIDATE = """\
rules:
  - tool: record_value
    decision: allow
  - tool: record_value
    when: arg.value == '1'
    decision: deny
"""


async def test_a_bad_candidate_is_refused_naming_the_rule_and_nothing_is_simulated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rule whose condition names an unknown variable is refused as at task start: exit 2, the
    message names policy.rules.1 and 'arg', and no history is read or reported; so are a file that is
    not YAML and a policy with an unknown field."""
    policy = tmp_path / "bad.yaml"
    policy.write_text(BAD_CANDIDATE)
    code, out, err = await simulate(capsys, "--policy", str(policy), str(HISTORIES))
    assert code == 2 and out == ""
    assert "policy.rules.1" in err and "undeclared reference to 'arg'" in err
    policy.write_text("rules: [tool: x\n")
    code, out, err = await simulate(capsys, "--policy", str(policy), str(HISTORIES))
    assert code == 2 and out == "" and "not YAML or JSON" in err
    policy.write_text("rules: []\napprovers: [cfo]\n")
    code, out, err = await simulate(capsys, "--policy", str(policy), str(HISTORIES))
    assert code == 2 and out == "" and "policy.approvers: Extra inputs are not permitted" in err


async def test_the_running_policy_as_candidate_changes_nothing_and_a_whole_spec_is_read_for_its_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The committed argument-condition runs simulated under their own policy, given as a whole
    TaskSpec in JSON, change no decision (exit 0 with --fail-on-change); raising the threshold
    changes the large one, and --changed lists only it."""
    runs = [
        run
        for name in ("allows_a_small_write_without_asking", "sends_a_large_write_for_approval")
        for run in chain_files(HISTORIES / f"test_an_argument_condition_{name}.json")
    ]
    task_input = json.loads(base64.b64decode(start_payload(json.loads(runs[0].read_text()))["data"]))
    task_spec = task_input.get("spec", task_input)  # a run begun on 0.2 has a TaskInput
    policy = tmp_path / "task.json"
    policy.write_text(json.dumps(task_spec))
    code, out, err = await simulate(capsys, "--policy", str(policy), *map(str, runs), "--fail-on-change")
    assert code == 0, err
    assert "2 runs, 2 actions: 0 would change" in out

    task_spec["policy"]["rules"][0]["when"] = task_spec["policy"]["rules"][0]["when"].replace("1000", "9000")
    policy.write_text(json.dumps(task_spec))
    code, out, err = await simulate(capsys, "--policy", str(policy), *map(str, runs), "--changed")
    assert code == 0, err
    rows = [row for row in out.splitlines() if "record_value" in row]
    assert len(rows) == 1 and rows[0].startswith("require_approval -> allow") and '"5000"' in rows[0]


async def test_a_question_is_simulated_as_routed_to_a_person_as_the_workflow_routes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An ask_human question a candidate allows is routed as a task routes it: to the candidate's
    default approvers, or denied when it names none (never allowed with nobody to answer)."""
    run = HISTORIES / "test_a_choice_question_is_answered_from_the_cli_and_only_with_one_of_its_options.json"
    files = [str(f) for f in chain_files(run)]  # it waited for its answer in a run of its own
    policy = tmp_path / "p.yaml"
    policy.write_text("rules: [{tool: ask_human, decision: allow}]\ndefault_approvers: [ops-lead]\n")
    code, out, err = await simulate(capsys, "--policy", str(policy), *files, "--json")
    assert code == 0, err
    [question] = [a for a in json.loads(out)["actions"] if a["tool"] == "ask_human"]
    assert question["candidate"]["verdict"] == "require_approval"
    assert question["candidate"]["approvers"] == ["ops-lead"]
    assert question["recorded"]["verdict"] == "require_approval"

    policy.write_text("rules: [{tool: ask_human, decision: allow}]\n")
    code, out, err = await simulate(capsys, "--policy", str(policy), *files, "--json")
    [question] = [a for a in json.loads(out)["actions"] if a["tool"] == "ask_human"]
    assert (
        question["candidate"]["verdict"] == "deny" and "nobody may answer" in question["candidate"]["reason"]
    )


async def test_a_history_whose_outcome_contradicts_its_policy_is_flagged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The recorded denial of a secret value, put in a history whose policy would allow it (as code
    that decided differently would leave), is reported inconsistent rather than trusted."""
    history = json.loads((HISTORIES / "test_a_deny_rules_reason_reaches_the_model.json").read_text())
    payload = start_payload(history)
    task_input = json.loads(base64.b64decode(payload["data"]))
    task_input.get("spec", task_input)["policy"]["rules"] = [{"tool": "record_value", "decision": "allow"}]
    payload["data"] = base64.b64encode(json.dumps(task_input).encode()).decode()
    path = tmp_path / "altered.json"
    path.write_text(json.dumps(history))
    policy = tmp_path / "p.yaml"
    policy.write_text("rules: [{tool: record_value, decision: allow}]\n")
    code, out, err = await simulate(capsys, "--policy", str(policy), str(path), "--json")
    assert code == 0, err
    [action] = json.loads(out)["actions"]
    assert action["outcome"] == "denied" and action["recorded"]["verdict"] == "allow"
    assert action["inconsistent"] is True and json.loads(out)["summary"]["inconsistent"] == 1


async def test_the_documented_example_runs_as_written_and_prints_what_the_docs_show(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/approvals.md's runnable example, run from the repository root, prints the output the
    docs show (all but the time it took)."""
    doc = (REPO / "docs" / "approvals.md").read_text().split("## Policy simulate", 1)[1]
    example = re.search(r"Runnable from a checkout.*?```sh\n(.*?)```\n```text\n(.*?)```", doc, re.DOTALL)
    assert example, "the runnable example of 'Policy simulate' is gone"
    command, shown = example.group(1).replace("\\\n", " "), example.group(2)
    words = shlex.split(command)
    assert words[:3] == ["agent-worker", "policy", "simulate"]
    monkeypatch.chdir(REPO)
    argv = [match for word in words[3:] for match in (sorted(glob.glob(word)) or [word])]
    code, out, err = await simulate(capsys, *argv)
    assert code == 0, err
    timing = re.compile(r"^simulated in [\d.]+ s$", re.MULTILINE)
    assert timing.sub("", out) == timing.sub("", shown)
