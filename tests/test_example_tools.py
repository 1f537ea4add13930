"""The shipped example's tools and task: planning refuses bad arguments and read tools, and the
task carries exactly the sheets shipped beside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_worker.activities.agent.tools import plan_call
from agent_worker.activities.errors import ToolPlanError
from agent_worker.examples.monthly_report.agent import draft_report, run_python, submit_report
from agent_worker.schemas.actions import BusinessWrite, SandboxCommand
from agent_worker.schemas.validation import parse_task_input

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "monthly_report"
DIGEST = "sha256:" + "ab" * 32


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
