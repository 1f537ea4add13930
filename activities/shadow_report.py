"""A shadow run's report: the sum of its tasks' results, as a JSON document and as Markdown.

Pure functions over ``schemas.shadow`` models, used by ``shadow.report``. The JSON document is the
contract (``shadow_report_version``); the Markdown is for people: the summary, then one row per task
with the diverged ones first, then each diverged task's actions.
"""

from __future__ import annotations

from typing import Any

from agent_worker.schemas.shadow import SAME, ShadowReportInput, ShadowSummary, ShadowTaskResult

REPORT_VERSION = 1
# A final answer is cut to this many characters in a Markdown table cell.
ANSWER_CELL_CHARS = 60

__all__ = ["REPORT_VERSION", "render_markdown", "report_document", "summarize"]


def summarize(results: list[ShadowTaskResult]) -> ShadowSummary:
    """The run in sum (the diverged tasks named, in task id order)."""
    scores = [r.score.score for r in results if r.score is not None and r.score.score is not None]
    return ShadowSummary(
        tasks=len(results),
        diverged=sum(1 for r in results if r.diverged),
        diverged_tasks=sorted(r.task_id for r in results if r.diverged),
        failed=sum(1 for r in results if r.phase != "completed"),
        same_actions=sum(r.same_actions for r in results),
        different_actions=sum(r.different_actions for r in results),
        missing_actions=sum(r.missing_actions for r in results),
        writes_proposed=sum(r.writes_proposed for r in results),
        writes_executed=sum(r.writes_executed for r in results),
        exact_matches=sum(1 for r in results if r.exact_match),
        scored=len(scores),
        mean_score=round(sum(scores) / len(scores), 6) if scores else None,
        cost_usd=round(sum(r.cost_usd for r in results), 6),
        recorded_cost_usd=round(sum(r.recorded_cost_usd for r in results), 6),
        active_seconds=round(sum(r.active_seconds for r in results), 3),
        recorded_active_seconds=round(sum(r.recorded_active_seconds for r in results), 3),
    )


def report_document(
    input: ShadowReportInput, summary: ShadowSummary, results: list[ShadowTaskResult]
) -> dict[str, Any]:
    """The JSON report: what ran, the summary, and every task's result (by task id)."""
    return {
        "shadow_report_version": REPORT_VERSION,
        "shadow_id": input.shadow_id,
        "candidate": input.candidate,
        "model": input.model,
        "scorer": input.scorer,
        "summary": summary.model_dump(mode="json"),
        "tasks": [r.model_dump(mode="json") for r in sorted(results, key=lambda r: r.task_id)],
    }


def render_markdown(document: dict[str, Any]) -> str:
    """The report for people (see the module docstring)."""
    s = document["summary"]
    lines = [
        f"# Shadow run {document['shadow_id']}",
        "",
        f"Candidate `{document['candidate']}`"
        + (f", model `{document['model']}`" if document.get("model") else "")
        + (f", scorer `{document['scorer']}`" if document.get("scorer") else "")
        + ".",
        "",
        "| | candidate | recorded |",
        "|---|---|---|",
        f"| tasks | {s['tasks']} | |",
        f"| diverged | {s['diverged']} | |",
        f"| failed | {s['failed']} | |",
        f"| actions same / different / missing | {s['same_actions']} / {s['different_actions']} / "
        f"{s['missing_actions']} | |",
        f"| business writes proposed / executed | {s['writes_proposed']} / {s['writes_executed']} | |",
        f"| exact final answers | {s['exact_matches']} | |",
        f"| mean score ({s['scored']} scored) | {_num(s['mean_score'])} | |",
        f"| cost (USD) | {s['cost_usd']:.6f} | {s['recorded_cost_usd']:.6f} |",
        f"| active seconds | {s['active_seconds']:.1f} | {s['recorded_active_seconds']:.1f} |",
        "",
    ]
    if s["diverged_tasks"]:
        lines += ["Diverged: " + ", ".join(f"`{t}`" for t in s["diverged_tasks"]), ""]
    lines += [
        "## Tasks",
        "",
        "| task | diverged | same | different | missing | exact | score | cost (USD) | recorded cost | "
        "seconds | recorded seconds | answer |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    tasks = sorted(document["tasks"], key=lambda t: (not t["diverged"], t["task_id"]))
    for t in tasks:
        score = t.get("score") or {}
        answer = t["error"] if t["phase"] != "completed" else (t.get("final_output") or "")
        lines.append(
            f"| `{t['task_id']}` | {'yes' if t['diverged'] else 'no'} | {t['same_actions']} | "
            f"{t['different_actions']} | {t['missing_actions']} | {'yes' if t['exact_match'] else 'no'} | "
            f"{_num(score.get('score')) if not score.get('error') else 'error'} | {t['cost_usd']:.6f} | "
            f"{t['recorded_cost_usd']:.6f} | {t['active_seconds']:.1f} | "
            f"{t['recorded_active_seconds']:.1f} | {_cell(answer)} |"
        )
    for t in tasks:
        different = [a for a in t["actions"] if a["match"] != SAME]
        if not t["diverged"] or not different:
            continue
        lines += ["", f"### `{t['task_id']}`", ""]
        for a in different:
            lines.append(f"- `{a['tool']}` {_cell(str(a['arguments']))}: {a['outcome']}")
    return "\n".join(lines) + "\n"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _cell(text: str) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= ANSWER_CELL_CHARS else text[: ANSWER_CELL_CHARS - 1] + "…"
