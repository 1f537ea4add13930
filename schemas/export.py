"""JSON Schema files for clients in other languages: ``python -m agent_worker.schemas.export`` writes them to
``schemas/jsonschema/``; a test regenerates them and fails when they drift from the models."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from agent_worker.schemas.approvals import ApprovalDecision, ApprovalRequest, DecisionOutcome
from agent_worker.schemas.events import Event
from agent_worker.schemas.streams import StreamEntry
from agent_worker.schemas.tasks import FollowUp, PolicySpec, TaskInput, TaskResult, TaskSpec, TaskStatus
from pydantic import BaseModel

OUT = Path(__file__).parent / "jsonschema"

# File name -> model: what a client sends (spec, input, decision, follow-up) and reads back.
EXPORTED: dict[str, type[BaseModel]] = {
    "event.v1.schema.json": Event,
    "task-spec.schema.json": TaskSpec,
    # A TaskSpec's policy alone: the candidate file of `agent-worker policy simulate`.
    "policy.schema.json": PolicySpec,
    "task-input.schema.json": TaskInput,
    "approval-decision.schema.json": ApprovalDecision,
    "approval-request.schema.json": ApprovalRequest,
    "decision-outcome.schema.json": DecisionOutcome,
    "follow-up.schema.json": FollowUp,
    "task-status.schema.json": TaskStatus,
    "task-result.schema.json": TaskResult,
    "stream-entry.schema.json": StreamEntry,
}


def render() -> dict[str, str]:
    """Every schema file's text, as the models say it should be."""
    return {
        name: json.dumps(
            model.model_json_schema(by_alias=True, mode="serialization"), indent=2, sort_keys=True
        )
        + "\n"
        for name, model in EXPORTED.items()
    }


def main() -> int:
    OUT.mkdir(exist_ok=True)
    for name, text in render().items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
