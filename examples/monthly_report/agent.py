"""The monthly-report agent: totals one month of sales in the sandbox, drafts a report, and proposes
writing it into the business store, which the task's policy lets only ``finance-lead`` approve.

Its tools show the three effect classes: ``run_python`` runs in the sandbox, ``draft_report`` is a
read-class tool that only saves an artifact (content-addressed, so running it twice is harmless), and
``submit_report`` is a business write.

``MonthlyReportScript`` is the deterministic model used when no provider is configured: it answers
from the conversation alone, as a real model would, so it survives retries and worker restarts.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agent_worker.activities.agent import (
    AgentRegistration,
    ConversationModel,
    current_turn,
    first_user_text,
    sandbox_tool,
    tool_outputs,
    write_tool,
)
from agent_worker.schemas.actions import BusinessWrite, SandboxCommand
from agent_worker.schemas.digests import is_digest
from agents import Agent, function_tool
from agents.items import TResponseOutputItem
from agents.testing import assistant_message, function_call

INSTRUCTIONS = """You prepare monthly sales reports.
1. Compute the month's total from the CSV sheets with run_python (files are in the work dir).
2. Draft a short markdown report with draft_report.
3. Submit it with submit_report, quoting the digest draft_report returned.
Report the outcome in one sentence."""

TOTAL_PROGRAM = """\
import csv, json, pathlib
from decimal import Decimal
month = {month!r}
by_sheet, rows = {{}}, 0
for path in sorted(pathlib.Path(".").glob("*.csv")):
    total = Decimal("0")
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            if row["date"].startswith(month):
                total += Decimal(row["amount"])
                rows += 1
    by_sheet[path.name] = str(total)
grand = sum((Decimal(v) for v in by_sheet.values()), Decimal("0"))
print(json.dumps({{"month": month, "total": str(grand), "rows": rows, "by_sheet": by_sheet}}))
"""


@sandbox_tool
def run_python(code: str) -> SandboxCommand:
    """Run a Python 3 program in the task's sandbox; the input sheets are in its working directory.

    Args:
        code: The program. Print results to stdout.
    """
    return SandboxCommand(argv=["python3", "-c", code], timeout_seconds=30)


@function_tool
def draft_report(month: str, markdown: str) -> str:
    """Save the report draft as an artifact and return its name and digest.

    Args:
        month: The month the report covers, as YYYY-MM.
        markdown: The report text.
    """
    ref = current_turn().save_artifact(f"report-{month}.md", markdown.encode("utf-8"), "text/markdown")
    return json.dumps({"name": ref.name, "digest": ref.digest, "size": ref.size})


@write_tool
def submit_report(month: str, total: str, report_digest: str) -> BusinessWrite:
    """Store the monthly report in the business system (requires approval).

    Args:
        month: The month, as YYYY-MM.
        total: The month's total sales, as a decimal string.
        report_digest: The digest draft_report returned.
    """
    if not re.fullmatch(r"\d{4}-\d{2}", month):
        raise ValueError(f"month must look like YYYY-MM, got {month!r}")
    if not is_digest(report_digest):
        raise ValueError("report_digest must be the 'sha256:...' digest draft_report returned")
    return BusinessWrite(
        record_type="monthly_report",
        payload={"month": month, "total": total, "report_digest": report_digest},
        artifacts=[report_digest],
    )


def build_agent() -> Agent:
    """A fresh monthly-report agent."""
    return Agent(
        name="monthly-report",
        instructions=INSTRUCTIONS,
        tools=[run_python, draft_report, submit_report],
    )


class MonthlyReportScript(ConversationModel):
    """What a capable model would do for this task, derived from the conversation alone."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        outputs = tool_outputs(items)
        match = re.search(r"\d{4}-\d{2}", first_user_text(items))
        month = match.group(0) if match else "2026-10"
        if "run_python" not in outputs:
            return [
                function_call("run_python", {"code": TOTAL_PROGRAM.format(month=month)}, call_id="call_total")
            ]
        figures = _stdout_json(outputs["run_python"])
        if figures is None:
            return [assistant_message(f"I could not compute the total: {outputs['run_python'][:300]}")]
        if "draft_report" not in outputs:
            lines = [
                f"# Sales report {month}",
                "",
                f"Total: {figures['total']} ({figures['rows']} sales)",
                "",
            ]
            lines += [f"- {sheet}: {amount}" for sheet, amount in figures["by_sheet"].items()]
            return [
                function_call(
                    "draft_report",
                    {"month": month, "markdown": "\n".join(lines) + "\n"},
                    call_id="call_draft",
                )
            ]
        if "submit_report" not in outputs:
            draft = json.loads(outputs["draft_report"])
            args = {"month": month, "total": figures["total"], "report_digest": draft["digest"]}
            return [function_call("submit_report", args, call_id="call_submit")]
        receipt = _json_or_none(outputs["submit_report"]) or {}
        total, note = figures["total"], ""
        if "note" in receipt:  # the approver edited the arguments before the write ran
            total = receipt["arguments"].get("total", total)
            note = f" The approver changed the arguments ({receipt['note']}); I computed {figures['total']}."
            receipt = receipt.get("result", {})
        if receipt.get("outcome") == "committed":
            return [
                assistant_message(
                    f"Submitted the {month} report: total {total}, record {receipt['record_id']}.{note}"
                )
            ]
        return [assistant_message(f"The {month} report was not submitted. {outputs['submit_report']}")]


def _json_or_none(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _stdout_json(sandbox_output: str) -> dict[str, Any] | None:
    result = _json_or_none(sandbox_output)
    if not result or result.get("exit_code") != 0:
        return None
    return _json_or_none(result.get("stdout", ""))


registration = AgentRegistration(
    name="monthly-report",
    build=build_agent,
    scripted_model=MonthlyReportScript,
    description="Totals a month of sales in the sandbox and files the report after approval.",
)
