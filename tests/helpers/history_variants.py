"""Copies of a recorded task history whose agent proposed other arguments: many realistic histories
from a few real runs, for ``policy simulate`` (tests and ``bench.policy_simulate``).

Only the proposed action's arguments in the ``agent.turn`` result change; every other event (the
spec, the decisions, what the next turn was told) stays as recorded, so a variant is a faithful
history of a run that proposed those arguments as long as its policy decides them as the original.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

COMPLETED = "EVENT_TYPE_ACTIVITY_TASK_COMPLETED"


def with_arguments(history: dict[str, Any], tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``history`` (``temporal workflow show -o json``) in which every proposed call of
    ``tool`` carries ``arguments``.

    Raises:
        ValueError: no turn result in the history proposes ``tool``.
    """
    varied = copy.deepcopy(history)
    changed = 0
    for event in varied["events"]:
        if event["eventType"] != COMPLETED:
            continue
        payloads = event["activityTaskCompletedEventAttributes"].get("result", {}).get("payloads", [])
        for payload in payloads:
            value = json.loads(base64.b64decode(payload["data"]))
            if not isinstance(value, dict) or not value.get("proposed"):
                continue
            for action in value["proposed"]:
                if action.get("tool") == tool:
                    action["arguments"] = dict(arguments)
                    changed += 1
            payload["data"] = base64.b64encode(json.dumps(value).encode()).decode()
    if not changed:
        raise ValueError(f"no turn in the history proposes {tool}")
    return varied


__all__ = ["with_arguments"]
