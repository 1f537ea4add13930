"""Payload validation without a server: task input (bare or wrapped), spec, policy rule, input file
and decision models refuse what is wrong naming the field; action versions and operation keys
are stable."""

from __future__ import annotations

from typing import Any

import pytest
from agent_worker.schemas.actions import BusinessWrite, action_version
from agent_worker.schemas.approvals import ApprovalDecision
from agent_worker.schemas.artifacts import InputFile
from agent_worker.schemas.tasks import PolicyRule, PolicyVerdict, TaskSpec
from agent_worker.schemas.validation import InvalidPayload, parse_task_input
from agent_worker.schemas.writes import operation_key
from pydantic import ValidationError

DIGEST = "sha256:" + "ab" * 32
SPEC = {"agent": "monthly-report", "prompt": "Report 2026-10."}


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
