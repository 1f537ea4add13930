"""The fault matrix: run every scenario's tests against the real components and print one table.

    python -m bench.faults [--out bench/results/faults.md] [-k EXPR]

Each scenario is one or more tests in ``tests/``; each test records what it observed, how many
duplicate effects, lost tasks and leftover sandboxes it measured (``tests/helpers/matrix.py``). This command
runs them in one pytest session (one dev server), reads the records from the JUnit XML report, and
prints: scenario, injected fault, expected, observed, duplicates, lost tasks, leftover sandboxes.
It exits non-zero when a test fails, a count is not zero, or the tenant fairness target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROPERTY = "fault_matrix"  # tests/helpers/matrix.py
# Scenario 7's target: the quiet tenant's median completion beside a flood, against alone.
FAIRNESS_TARGET = 2.0


@dataclass(frozen=True)
class Scenario:
    number: int
    name: str
    fault: str
    expected: str
    tests: tuple[str, ...]


SCENARIOS = (
    Scenario(
        1,
        "worker killed while awaiting approval",
        "SIGKILL the worker process; approve while no worker runs; start another",
        "another worker completes the task; the approval binds; one write",
        ("tests/test_worker_crash.py::test_sigkill_while_awaiting_approval_then_new_worker_completes_once",),
    ),
    Scenario(
        2,
        "write committed, response lost",
        "the write commits, its response is lost (SQLite, PostgreSQL, HTTP)",
        "reconciled by lookup; one row",
        ("tests/test_exactly_once.py::test_lost_response_is_reconciled_by_lookup",),
    ),
    Scenario(
        3,
        "cancel with a live sandbox command",
        "cancel the task while `sleep 300` runs in its container",
        "command stopped, container and volume removed, time recorded",
        ("tests/test_docker_tasks.py::test_cancel_during_a_long_command_stops_it_and_removes_the_container",),
    ),
    Scenario(
        4,
        "permission revoked between approval and commit",
        "revoke the approver after approval, before the write runs",
        "write blocked; asked again; written once after a valid approval",
        ("tests/test_reauthorization.py::test_revoked_after_approval_blocks_the_write_and_asks_again",),
    ),
    Scenario(
        5,
        "sandbox disappears mid-task",
        "`docker rm -f` the task's container while its command runs",
        "loss detected; rebuilt from inputs and rerun; evidence marked incomplete",
        ("tests/test_fault_matrix.py::test_sandbox_removed_mid_command_is_rebuilt_and_the_evidence_says_so",),
    ),
    Scenario(
        6,
        "old task meets new code",
        "committed histories (both sides of each patch); state from newer code",
        "every history replays; newer state ends handed_off with the reason",
        (
            "tests/test_replay.py::test_committed_history_replays",
            "tests/test_fault_matrix.py::test_state_from_newer_code_is_handed_off_with_the_reason",
        ),
    ),
    Scenario(
        7,
        "two tenants, one floods",
        "20 long tasks at once from a tenant capped at 3, beside 5 quiet-tenant tasks",
        f"3 run, 17 refused and recorded; quiet median within {FAIRNESS_TARGET:g}x of alone",
        ("tests/test_fault_matrix.py::test_a_flooding_tenant_is_capped_and_the_other_keeps_its_pace",),
    ),
    Scenario(
        8,
        "evidence collection fails",
        "every lookup confirming the write finds the business system down",
        "completed, marked evidence-incomplete, never plain success",
        ("tests/test_fault_matrix.py::test_unconfirmable_evidence_never_reads_as_plain_success",),
    ),
    Scenario(
        9,
        "Temporal server killed and restarted",
        "SIGKILL the dev server mid-run; restart it on the same database",
        "every task finishes; each write once",
        (
            "tests/test_fault_matrix.py::"
            "test_tasks_finish_after_the_server_is_killed_and_restarted_on_its_database",
        ),
    ),
    Scenario(
        10,
        "model provider answers 429 / 500 / 400",
        "a local OpenAI-shaped server answers 429 Retry-After, 500, 400, 429 quota",
        "429 and 500 retried (after Retry-After); 400 and quota fail at once, explained",
        (
            "tests/test_providers_e2e.py::test_retryable_errors_are_retried_by_temporal_honouring_retry_after",
            "tests/test_providers_e2e.py::test_refused_requests_fail_the_task_without_retry",
        ),
    ),
)


@dataclass
class Row:
    scenario: Scenario
    passed: int = 0
    failed: list[str] = field(default_factory=list)
    observed: list[str] = field(default_factory=list)
    counts: dict[str, int | None] = field(default_factory=lambda: dict.fromkeys(COUNTS))
    figures: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        counts_ok = all(not v for v in self.counts.values())
        ratio = self.figures.get("quiet_ratio")
        return (
            self.passed > 0 and not self.failed and counts_ok and (ratio is None or ratio <= FAIRNESS_TARGET)
        )

    def add(self, values: dict[str, object]) -> None:
        if (observed := str(values.get("observed", ""))) and observed not in self.observed:
            self.observed.append(observed)
        for name in COUNTS:
            value = values.get(name)
            if isinstance(value, int):
                self.counts[name] = (self.counts[name] or 0) + value
        for name, value in values.items():
            if name not in COUNTS and isinstance(value, int | float) and not isinstance(value, bool):
                self.figures[name] = max(self.figures.get(name, value), value)


COUNTS = ("duplicates", "lost", "leftover")


def _scenario_of(nodeid: str) -> Scenario | None:
    base = nodeid.split("[", 1)[0]
    return next((s for s in SCENARIOS if base in s.tests), None)


def _nodeid(case: ET.Element) -> str:
    """``tests/x.py::name[param]`` from a JUnit testcase (classname ``tests.x``)."""
    module = case.get("classname", "").replace(".", "/") + ".py"
    return f"{module}::{case.get('name')}"


def collect(junit: Path) -> list[Row]:
    """The table's rows from the JUnit XML pytest wrote."""
    rows = {s.number: Row(s) for s in SCENARIOS}
    for case in ET.parse(junit).getroot().iter("testcase"):
        scenario = _scenario_of(_nodeid(case))
        if scenario is None:
            continue
        row = rows[scenario.number]
        problem = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        if problem is not None:
            row.failed.append(f"{case.get('name')}: {problem.tag} {problem.get('message', '')[:200]}")
            continue
        row.passed += 1
        for prop in case.iter("property"):
            if prop.get("name") == PROPERTY:
                row.add(json.loads(prop.get("value", "{}")))
    return list(rows.values())


def _cell(value: int | None) -> str:
    return "-" if value is None else str(value)


def render(rows: list[Row], seconds: float) -> str:
    lines = [
        "# Fault matrix",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; {seconds:.0f} s. Real Temporal dev server, Docker, "
        "PostgreSQL, bubblewrap; `-` where a count does not apply (replays run no activities).",
        "",
        "| # | scenario | injected fault | expected | observed | tests | duplicates | lost | leftover |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        s = row.scenario
        observed = "; ".join(row.observed[:3]) + (
            f" (+{len(row.observed) - 3} more)" if len(row.observed) > 3 else ""
        )
        if row.failed:
            observed = "FAILED: " + " / ".join(row.failed)
        verdict = "ok" if row.ok else "**NOT MET**"
        lines.append(
            f"| {s.number} | {s.name} | {s.fault} | {s.expected} | {observed.replace('|', '/')} | "
            f"{row.passed} passed, {verdict} | "
            + " | ".join(_cell(row.counts[name]) for name in COUNTS)
            + " |"
        )
    total = {name: sum(r.counts[name] or 0 for r in rows) for name in COUNTS}
    lines += [
        "",
        f"Totals: {total['duplicates']} duplicates, {total['lost']} lost tasks, {total['leftover']} leftover "
        f"sandboxes; {sum(r.ok for r in rows)}/{len(rows)} scenarios as expected.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--out", type=Path, default=REPO / "bench/results/faults.md", help="where to write the table"
    )
    parser.add_argument("-k", dest="select", help="only the tests matching this pytest -k expression")
    args = parser.parse_args(argv)
    tests = sorted({t for s in SCENARIOS for t in s.tests})
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "faults.xml"
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            *tests,
        ]
        if args.select:
            command += ["-k", args.select]
        started = time.monotonic()
        subprocess.run(command, cwd=REPO, check=False)
        seconds = time.monotonic() - started
        if not junit.exists():
            print("faults: pytest wrote no report", file=sys.stderr)
            return 2
        rows = collect(junit)
    if args.select:
        rows = [r for r in rows if r.passed or r.failed]
    table = render(rows, seconds)
    print("\n" + table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table)
    print(f"written to {args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out}")
    return 0 if rows and all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
