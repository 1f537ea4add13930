"""Every committed history replays in the SDK's own, unmodified workflow sandbox, with nothing of ours
passed through by configuration: the worker passes its workflow code through for speed
(``agent_worker.plugin.WORKFLOW_CODE``), and this proves the workflows would run the same where the
sandbox imports them afresh for each run and applies all its restrictions to them."""

from __future__ import annotations

import ast
import json
from collections.abc import AsyncIterator
from pathlib import Path

from agent_worker.schemas.conditions import warm_conditions
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from agent_worker.plugin import LIBRARY_PASSTHROUGH
from tests.helpers.support import HISTORY_IDS, REPO, WORKFLOWS

HISTORIES = REPO / "tests" / "histories"
OURS = (
    "agent_worker.workflows",
    "agent_worker.schemas",
    "agent_worker.activities",
    "agent_worker.telemetry",
    "agent_worker.security",
    "agent_worker",
)


def _committed(folder: Path) -> list[tuple[Path, str]]:
    ids = json.loads((folder / HISTORY_IDS).read_text())
    return [(p, ids[p.stem]) for p in sorted(folder.glob("*.json")) if p.name != HISTORY_IDS]


async def test_every_committed_history_replays_in_the_sdks_full_sandbox() -> None:
    """All committed histories, in every folder, replay without a failure under the SDK's
    ``SandboxedWorkflowRunner`` (the class itself, not ours) with only library passthrough."""
    warm_conditions()  # as workflow_runner() does for a worker: CEL's parser is built outside
    runner = SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*LIBRARY_PASSTHROUGH)
    )
    assert type(runner) is SandboxedWorkflowRunner
    assert not set(OURS) & runner.restrictions.passthrough_modules
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter, workflow_runner=runner)
    folders = sorted({p.parent for p in HISTORIES.rglob(HISTORY_IDS)})
    replayed = 0
    for folder in folders:
        committed = _committed(folder)

        async def histories(committed: list[tuple[Path, str]] = committed) -> AsyncIterator[WorkflowHistory]:
            for path, workflow_id in committed:
                yield WorkflowHistory.from_json(workflow_id, json.loads(path.read_text()))

        results = await replayer.replay_workflows(histories(), raise_on_replay_failure=False)
        assert not results.replay_failures, {folder.name: results.replay_failures}
        replayed += len(committed)
    assert replayed == sum(1 for p in HISTORIES.rglob("*.json") if p.name != HISTORY_IDS)


def test_the_workflow_code_is_imported_inside_the_sandbox() -> None:
    """No workflow module imports another under ``imports_passed_through``: without passthrough by
    configuration, the sandbox imports all of the workflow code itself (and the replay above runs it
    there)."""
    passed_through = []
    for path in sorted((REPO / "workflows").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.With) and "imports_passed_through" in ast.unparse(
                node.items[0].context_expr
            ):
                for statement in ast.walk(node):
                    if isinstance(statement, ast.ImportFrom) and (statement.module or "").startswith(
                        "agent_worker.workflows"
                    ):
                        passed_through.append(f"{path.name}:{statement.lineno}")
    assert not passed_through, passed_through
