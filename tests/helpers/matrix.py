"""The fault matrix's shared measurements. Each scenario test measures what it leaves behind and
records it with ``record``; ``python -m bench.faults`` runs the tests and prints the table."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import docker
from agent_worker.activities.sandbox.base import LABEL_TASK
from agent_worker.schemas.config import WorkerConfig

from tests.helpers.containers import containers_of

PROPERTY = "fault_matrix"
# pytest's ``record_property`` fixture.
Record = Callable[[str, Any], None]


def record(
    record_property: Callable[[str, Any], None],
    *,
    observed: str,
    duplicates: int | None,
    lost: int | None,
    leftover: int | None,
    **figures: float,
) -> None:
    """Record one test's outcome for the fault table (JUnit XML property ``fault_matrix``); ``None``
    where a count does not apply (a replay has no side effects)."""
    values = {"observed": observed, "duplicates": duplicates, "lost": lost, "leftover": leftover, **figures}
    record_property(PROPERTY, json.dumps(values, sort_keys=True))


def leftover_sandboxes(config: WorkerConfig, task_ids: Iterable[str]) -> int:
    """Sandboxes still there for these tasks: process-tier work dirs under the worker's sandbox root,
    and Docker containers labelled with the task (when a daemon is reachable)."""
    ids = set(task_ids)
    left = 0
    for labels in config.sandbox_root.glob("*/labels.json"):
        try:
            left += json.loads(labels.read_text()).get(LABEL_TASK) in ids
        except (OSError, ValueError):
            left += 1  # half-written: still a leftover
    try:
        daemon = docker.from_env()
        daemon.ping()
    except Exception:
        return left
    for task_id in ids:
        left += len(containers_of(task_id))
    return left
