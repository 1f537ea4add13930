"""Pure logic, no Temporal server: payload validation, versions and keys, policy, decisions, the
artifact and business stores, worker configuration, tool planning and the shipped example."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from activities.agent.tools import plan_call
from activities.artifacts import LocalArtifactStore
from activities.business import SqliteBusinessStore
from activities.errors import ArtifactCorrupt, ArtifactNotFound, ToolPlanError, WriteConflict
from examples.monthly_report.agent import draft_report, run_python, submit_report
from schemas.actions import BusinessWrite, EffectClass, ProposedAction, SandboxCommand, action_version
from schemas.approvals import ApprovalDecision, ApprovalRequest
from schemas.artifacts import InputFile
from schemas.config import ConfigError, WorkerConfig
from schemas.digests import digest_bytes, digest_json
from schemas.tasks import PolicyRule, PolicySpec, PolicyVerdict, TaskSpec
from schemas.validation import InvalidPayload, parse_task_input
from schemas.writes import WriteInput, WriteOutcome, operation_key
from workflows.decisions import why_not
from workflows.policy import evaluate

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "monthly_report"
DIGEST = "sha256:" + "ab" * 32
KEY = operation_key("task-1", "call-1")
SPEC = {"agent": "monthly-report", "prompt": "Report 2026-10."}


def _action(tool: str, effect: EffectClass, **arguments: Any) -> ProposedAction:
    sandbox = effect is EffectClass.SANDBOX
    operation = (
        SandboxCommand(argv=["true"]) if sandbox else BusinessWrite(record_type="r", payload=arguments)
    )
    fields = {"tool": tool, "effect": effect, "arguments": arguments, "operation": operation}
    return ProposedAction(call_id="call-1", version=action_version(tool, arguments, operation), **fields)


def test_parse_task_input_accepts_a_bare_spec_and_a_wrapped_one() -> None:
    """Clients may send the TaskSpec itself or ``{"spec": ...}``; both give the same TaskInput."""
    bare = parse_task_input(dict(SPEC))
    wrapped = parse_task_input({"spec": dict(SPEC)})
    assert bare == wrapped
    assert (bare.spec.agent, bare.spec.tenant, bare.state) == ("monthly-report", "default", None)


def test_parse_task_input_errors_name_the_field() -> None:
    """A bad field is reported by its full path, for bare and wrapped specs alike."""
    bad = {**SPEC, "inputs": [{"name": "no spaces allowed", "content": "x"}]}
    for raw in (bad, {"spec": bad}):
        with pytest.raises(InvalidPayload, match=r"spec\.inputs\.0\.name: String should match"):
            parse_task_input(raw)
    with pytest.raises(InvalidPayload, match=r"spec\.prompt: Field required"):
        parse_task_input({"agent": "a"})


@pytest.mark.parametrize("raw", [[SPEC], "spec", None, 3])
def test_parse_task_input_rejects_non_objects(raw: object) -> None:
    """Input that is not a JSON object is refused, saying what it was instead."""
    with pytest.raises(InvalidPayload, match=f"must be a JSON object, got {type(raw).__name__}"):
        parse_task_input(raw)


def test_task_spec_rejects_duplicate_input_names() -> None:
    """Two inputs with one name would overwrite each other in the sandbox, so the spec is refused."""
    inputs = [{"name": name, "content": "x"} for name in ("a.csv", "b.csv", "a.csv")]
    with pytest.raises(ValidationError, match="repeated: a.csv"):
        TaskSpec.model_validate({**SPEC, "inputs": inputs})


def test_require_approval_rule_needs_approvers() -> None:
    """A rule requiring approval with nobody to approve is refused; other verdicts need nobody."""
    with pytest.raises(ValidationError, match="needs at least one approver"):
        PolicyRule(tool="submit_report", decision=PolicyVerdict.REQUIRE_APPROVAL)
    assert PolicyRule(decision=PolicyVerdict.REQUIRE_APPROVAL, approvers=["lead"]).approvers == ["lead"]
    assert PolicyRule(decision=PolicyVerdict.DENY).approvers == []


@pytest.mark.parametrize("source", [{"content": "x", "digest": DIGEST}, {}])
def test_input_file_needs_exactly_one_source(source: dict[str, str]) -> None:
    """An input gives its content inline or by digest: both or neither is refused."""
    with pytest.raises(ValidationError, match="exactly one of 'content' or 'digest'"):
        InputFile(name="a.csv", **source)
    assert InputFile(name="a.csv", digest=DIGEST).content is None


def test_edited_args_only_with_an_edit_decision() -> None:
    """``edited_args`` is required for an edit and refused for approve and reject."""
    base = {"request_id": "req-1", "version": DIGEST, "principal": "lead"}
    with pytest.raises(ValidationError, match="edited_args is required"):
        ApprovalDecision(**base, decision="edit")
    for decision in ("approve", "reject"):
        with pytest.raises(ValidationError, match="only allowed when decision is 'edit'"):
            ApprovalDecision(**base, decision=decision, edited_args={"total": "1"})
    assert ApprovalDecision(**base, decision="edit", edited_args={"total": "1"}).edited_args == {"total": "1"}


def test_action_version_ignores_key_order_but_not_content() -> None:
    """The version is stable across key order; a changed argument or artifact digest changes it."""

    def version(arguments: dict[str, Any], artifact: str = DIGEST) -> str:
        operation = BusinessWrite(record_type="r", payload=arguments, artifacts=[artifact])
        return action_version("submit_report", arguments, operation)

    base = version({"month": "2026-10", "total": "10"})
    assert version({"total": "10", "month": "2026-10"}) == base
    assert version({"month": "2026-10", "total": "11"}) != base
    assert version({"month": "2026-10", "total": "10"}, "sha256:" + "cd" * 32) != base


def test_operation_key_is_deterministic_per_task_and_call() -> None:
    """The same task and call always give the same key; another task or call gives another."""
    key = operation_key("task-1", "call-1")
    assert key == operation_key("task-1", "call-1")
    assert key.startswith("op-")
    assert len({key, operation_key("task-2", "call-1"), operation_key("task-1", "call-2")}) == 3
    assert operation_key("task-1", "call-1x") != operation_key("task-1c", "all-1x")


def test_policy_first_matching_rule_wins() -> None:
    """Of several matching rules the first decides, and its reason is reported."""
    policy = PolicySpec(
        rules=[
            PolicyRule(tool="submit_report", decision=PolicyVerdict.ALLOW, reason="trusted"),
            PolicyRule(effect=EffectClass.WRITE, decision=PolicyVerdict.DENY),
        ]
    )
    decision = evaluate(policy, _action("submit_report", EffectClass.WRITE))
    assert (decision.verdict, decision.reason) == (PolicyVerdict.ALLOW, "trusted")
    other = evaluate(policy, _action("delete_all", EffectClass.WRITE))
    assert (other.verdict, other.reason) == (PolicyVerdict.DENY, "policy rule 1 (deny)")


def test_policy_rules_match_tool_and_effect_together() -> None:
    """A rule naming a tool and an effect matches only actions with both; others fall through."""
    narrow = PolicyRule(tool="run_python", effect=EffectClass.WRITE, decision=PolicyVerdict.DENY)
    broad = PolicyRule(effect=EffectClass.SANDBOX, decision=PolicyVerdict.REQUIRE_APPROVAL, approvers=["ops"])
    policy = PolicySpec(rules=[narrow, broad])
    decision = evaluate(policy, _action("run_python", EffectClass.SANDBOX))
    assert (decision.verdict, decision.approvers) == (PolicyVerdict.REQUIRE_APPROVAL, ("ops",))


def test_policy_defaults() -> None:
    """With no rule: sandbox commands are allowed, writes need a default approver or are denied."""
    write = _action("submit_report", EffectClass.WRITE)
    assert evaluate(PolicySpec(), _action("run_python", EffectClass.SANDBOX)).verdict is PolicyVerdict.ALLOW
    approval = evaluate(PolicySpec(default_approvers=["lead", "cfo"]), write)
    assert (approval.verdict, approval.approvers) == (PolicyVerdict.REQUIRE_APPROVAL, ("lead", "cfo"))
    denied = evaluate(PolicySpec(), write)
    assert (denied.verdict, denied.approvers) == (PolicyVerdict.DENY, ())
    assert "no default approver" in denied.reason


def _request() -> ApprovalRequest:
    action = _action("submit_report", EffectClass.WRITE, month="2026-10", total="10")
    now = datetime(2026, 11, 1, tzinfo=UTC)
    times = {"requested_at": now, "deadline": now + timedelta(days=3)}
    return ApprovalRequest(
        request_id="req-1", action=action, version=action.version, approvers=["lead"], **times
    )


def _decision(request: ApprovalRequest, **changes: Any) -> ApprovalDecision:
    fields = {"request_id": "req-1", "version": request.version, "decision": "approve", "principal": "lead"}
    return ApprovalDecision.model_validate({**fields, **changes})


def test_why_not_explains_each_ignored_decision() -> None:
    """Unknown request, already decided, stale version, wrong principal and unknown edited
    arguments are each refused with their own reason."""
    request = _request()
    cases = [
        ([request], _decision(request, request_id="req-9"), "unknown request 'req-9'"),
        ([request.model_copy(update={"decided": True})], _decision(request), "already decided"),
        ([request], _decision(request, version=DIGEST), "stale version"),
        ([request], _decision(request, principal="intern"), "principal 'intern' may not decide"),
        ([request], _decision(request, decision="edit", edited_args={"bonus": "1"}), "have: bonus"),
    ]
    for requests, decision, words in cases:
        reason = why_not(requests, decision, "t", PolicySpec())
        assert reason is not None and words in reason, (decision, reason)


def test_why_not_accepts_valid_decisions() -> None:
    """A current decision by an allowed principal, including an edit of known arguments, applies."""
    request = _request()
    assert why_not([request], _decision(request), "t", PolicySpec()) is None
    assert why_not([request], _decision(request, decision="reject", reason="no"), "t", PolicySpec()) is None
    assert (
        why_not([request], _decision(request, decision="edit", edited_args={"total": "9"}), "t", PolicySpec())
        is None
    )


def test_artifact_put_is_idempotent(tmp_path: Path) -> None:
    """Storing the same bytes twice gives the same digest and one stored file."""
    store = LocalArtifactStore(tmp_path)
    digest = store.put(b"report")
    assert store.put(b"report") == digest == digest_bytes(b"report")
    assert len([p for p in tmp_path.rglob("*") if p.is_file()]) == 1
    assert store.get(digest) == b"report"


def test_artifact_get_serves_only_verified_content(tmp_path: Path) -> None:
    """Bytes altered on disk raise ``ArtifactCorrupt``; a digest never stored, ``ArtifactNotFound``."""
    store = LocalArtifactStore(tmp_path)
    digest = store.put(b"total: 100")
    [stored] = [p for p in tmp_path.rglob("*") if p.is_file()]
    stored.write_bytes(b"total: 999")
    with pytest.raises(ArtifactCorrupt, match=digest):
        store.get(digest)
    with pytest.raises(ArtifactNotFound):
        store.get(DIGEST)


def _write(payload: dict[str, Any]) -> WriteInput:
    return WriteInput(operation_key=KEY, task_id="t-1", tenant="acme", record_type="report", payload=payload)


def test_business_first_write_commits(tmp_path: Path) -> None:
    """A key unknown to lookup (None) commits one record, and lookup then returns its receipt."""
    store = SqliteBusinessStore(tmp_path / "business.db")
    assert store.lookup(KEY) is None
    receipt = store.write(_write({"month": "2026-10", "total": "10"}))
    assert (receipt.outcome, receipt.replayed) == (WriteOutcome.COMMITTED, False)
    assert receipt.payload_digest == digest_json({"month": "2026-10", "total": "10"})
    assert store.count() == 1
    assert store.lookup(receipt.operation_key) == receipt


def test_business_repeated_write_replays_the_first_receipt(tmp_path: Path) -> None:
    """The same key with the same payload commits nothing new and returns the first receipt."""
    store = SqliteBusinessStore(tmp_path / "business.db")
    first = store.write(_write({"month": "2026-10", "total": "10"}))
    again = store.write(_write({"total": "10", "month": "2026-10"}))
    assert again.replayed is True
    assert again.model_copy(update={"replayed": False}) == first
    assert store.count() == 1


def test_business_same_key_different_payload_conflicts(tmp_path: Path) -> None:
    """The same key with another payload is a conflict; the first record is kept unchanged."""
    store = SqliteBusinessStore(tmp_path / "business.db")
    first = store.write(_write({"total": "10"}))
    with pytest.raises(WriteConflict, match=first.operation_key):
        store.write(_write({"total": "11"}))
    assert store.count() == 1
    assert store.lookup(first.operation_key) == first


def test_business_concurrent_writes_of_one_key_commit_once(tmp_path: Path) -> None:
    """Several threads writing one key at once yield exactly one row and one non-replayed receipt."""
    store = SqliteBusinessStore(tmp_path / "business.db")
    threads = 8
    barrier = threading.Barrier(threads)

    def write(_: int) -> Any:
        barrier.wait()
        return store.write(_write({"total": "10"}))

    with ThreadPoolExecutor(threads) as pool:
        receipts = list(pool.map(write, range(threads)))
    assert store.count() == 1
    assert sorted(r.replayed for r in receipts) == [False] + [True] * (threads - 1)
    assert len({r.record_id for r in receipts}) == 1


def test_config_reads_agent_worker_variables() -> None:
    """``AGENT_WORKER_*`` variables set their fields; agents are a comma list; others are ignored."""
    config = WorkerConfig.from_env(
        {
            "AGENT_WORKER_TASK_QUEUE": "reports",
            "AGENT_WORKER_DATA_DIR": "/srv/aw",
            "AGENT_WORKER_AGENTS": "pkg.a:reg, pkg.b:reg,",
            "AGENT_WORKER_MAX_CONCURRENT_ACTIVITIES": "8",
            "AGENT_WORKER_AGENTS_TRACING": "true",
            "PATH": "/usr/bin",
        }
    )
    assert (config.task_queue, config.data_dir) == ("reports", Path("/srv/aw"))
    assert config.agents == ["pkg.a:reg", "pkg.b:reg"]
    assert (config.max_concurrent_activities, config.agents_tracing) == (8, True)
    assert config.sandbox_root == Path("/srv/aw/sandboxes")


def test_config_unknown_variable_is_named() -> None:
    """A misspelt ``AGENT_WORKER_`` variable is an error naming it, not silently ignored."""
    with pytest.raises(ConfigError, match="^AGENT_WORKER_TASKQUEUE: unknown setting"):
        WorkerConfig.from_env({"AGENT_WORKER_TASKQUEUE": "reports"})


@pytest.mark.parametrize(
    ("variable", "value"),
    [("AGENT_WORKER_MAX_CONCURRENT_ACTIVITIES", "0"), ("AGENT_WORKER_LOG_LEVEL", "loud")],
)
def test_config_invalid_value_names_the_variable(variable: str, value: str) -> None:
    """An invalid value is an error naming the variable that holds it."""
    with pytest.raises(ConfigError, match=f"invalid configuration: {variable}: "):
        WorkerConfig.from_env({variable: value})


def test_config_never_shows_the_openai_key() -> None:
    """The OpenAI key is read from ``OPENAI_API_KEY`` but never appears when the config is shown."""
    key = "sk-test-0123456789abcdef"
    config = WorkerConfig.from_env({"OPENAI_API_KEY": key})
    assert config.openai_api_key is not None
    assert config.openai_api_key.get_secret_value() == key
    assert config.uses_openai is True
    for shown in (repr(config), str(config), config.model_dump_json()):
        assert key not in shown
    with pytest.raises(ConfigError) as info:
        WorkerConfig.from_env({"OPENAI_API_KEY": key, "AGENT_WORKER_LOG_LEVEL": "loud"})
    assert key not in str(info.value)


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"month": "2026-10"}, "invalid arguments for submit_report: total: Field required"),
        ({"month": "2026-10", "total": "10", "report_digest": "abc"}, "report_digest must be the 'sha256:"),
        ({"month": "October", "total": "10", "report_digest": DIGEST}, "month must look like YYYY-MM"),
    ],
)
def test_submit_report_refuses_bad_arguments(arguments: dict[str, Any], words: str) -> None:
    """Invalid arguments or a malformed digest are a ``ToolPlanError`` saying what is wrong."""
    with pytest.raises(ToolPlanError) as info:
        plan_call(submit_report, arguments)
    assert words in str(info.value)


def test_submit_report_plans_a_write_referring_to_the_report() -> None:
    """Valid arguments plan a business write whose artifacts name the report's digest."""
    operation = plan_call(submit_report, {"month": "2026-10", "total": "10.50", "report_digest": DIGEST})
    assert isinstance(operation, BusinessWrite)
    assert operation.record_type == "monthly_report"
    assert operation.artifacts == [DIGEST]
    assert operation.payload == {"month": "2026-10", "total": "10.50", "report_digest": DIGEST}


def test_plan_call_plans_sandbox_commands_and_refuses_read_tools() -> None:
    """A sandbox tool plans a command; a read tool has no operation to plan."""
    command = plan_call(run_python, {"code": "print(1)"})
    assert isinstance(command, SandboxCommand)
    assert command.argv == ["python3", "-c", "print(1)"]
    with pytest.raises(ToolPlanError, match="has no declared effect"):
        plan_call(draft_report, {"month": "2026-10", "markdown": "x"})


def test_example_task_inputs_match_the_sheets() -> None:
    """The example task carries exactly the CSV sheets shipped beside it, byte for byte."""
    raw = json.loads((EXAMPLE / "task.json").read_text(encoding="utf-8"))
    spec = parse_task_input(raw).spec
    sheets = {p.name: p.read_bytes() for p in (EXAMPLE / "sheets").glob("*.csv")}
    assert sheets
    assert {f.name: (f.content or "").encode("utf-8") for f in spec.inputs} == sheets


def test_same_key_with_another_record_type_is_a_conflict(tmp_path: Path) -> None:
    """A key committed for one record type is not a replay for another: it is a conflict."""
    store = SqliteBusinessStore(tmp_path / "b.db")
    store.write(
        WriteInput(
            operation_key="op-samekey01", task_id="t", tenant="a", record_type="invoice", payload={"x": 1}
        )
    )
    with pytest.raises(WriteConflict):
        store.write(
            WriteInput(
                operation_key="op-samekey01", task_id="t", tenant="a", record_type="refund", payload={"x": 1}
            )
        )
    assert store.count() == 1
