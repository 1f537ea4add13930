"""Worker configuration from ``AGENT_WORKER_*`` variables: read, refused naming the variable, and
never showing the OpenAI key."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from agent_worker.schemas.config import ConfigError, WorkerConfig
from temporalio.client import Client

from agent_worker.worker import build_workers
from tests.helpers.support import REPO, make_config


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


def test_the_workflow_cache_follows_its_memory_budget_unless_a_count_is_set() -> None:
    """The cache holds as many workflows as AGENT_WORKER_WORKFLOW_CACHE_MB allows at the measured MB
    per cached workflow (DEFAULT_WORKFLOW_CACHE_MB unset); AGENT_WORKER_MAX_CACHED_WORKFLOWS, even 0,
    wins. (The worker's use of it: tests/test_metrics.py evicts with a cache of one.)"""
    from agent_worker.schemas.config import DEFAULT_WORKFLOW_CACHE_MB, MB_PER_CACHED_WORKFLOW

    assert WorkerConfig().workflow_cache_size == int(DEFAULT_WORKFLOW_CACHE_MB / MB_PER_CACHED_WORKFLOW)
    doubled = WorkerConfig.from_env({"AGENT_WORKER_WORKFLOW_CACHE_MB": "150"})
    assert doubled.workflow_cache_size == int(150 / MB_PER_CACHED_WORKFLOW)
    both = {"AGENT_WORKER_WORKFLOW_CACHE_MB": "75", "AGENT_WORKER_MAX_CACHED_WORKFLOWS": "0"}
    assert WorkerConfig.from_env(both).workflow_cache_size == 0
    with pytest.raises(ConfigError, match="AGENT_WORKER_WORKFLOW_CACHE_MB"):
        WorkerConfig.from_env({"AGENT_WORKER_WORKFLOW_CACHE_MB": "0"})


def test_the_cache_count_uses_the_committed_measurement_of_memory_per_cached_workflow() -> None:
    """MB_PER_CACHED_WORKFLOW turns the budget into a count, so it must be what
    ``python -m bench.cache_memory`` last measured (bench/results/cache_memory.md), within the
    measurement's noise: a figure left behind after the workflows got lighter (0.35 against 0.17 once
    the sandbox passed our packages through) halves the cache a budget buys, and a heavier workflow
    would overrun the budget."""
    from agent_worker.schemas.config import MB_PER_CACHED_WORKFLOW

    report = (REPO / "bench" / "results" / "cache_memory.md").read_text()
    found = re.search(r"\*\*MB per cached workflow: ([0-9.]+)\*\*", report)
    assert found, "bench/results/cache_memory.md has no 'MB per cached workflow' figure"
    measured = float(found.group(1))
    assert abs(MB_PER_CACHED_WORKFLOW - measured) <= 0.15 * measured, (
        f"MB_PER_CACHED_WORKFLOW is {MB_PER_CACHED_WORKFLOW}, the committed measurement {measured}"
    )


async def test_the_sticky_timeout_is_the_sdks_default_unless_set(client: Client, tmp_path: Path) -> None:
    """Each workflow worker ``build_workers`` makes waits ``sticky_timeout_seconds`` (10 s, the SDK's
    default, unless AGENT_WORKER_STICKY_TIMEOUT_SECONDS says otherwise) before a task on its sticky
    queue goes to the task queue; under a second is refused, naming the variable."""
    assert WorkerConfig().sticky_timeout_seconds == 10.0
    assert WorkerConfig.from_env({"AGENT_WORKER_STICKY_TIMEOUT_SECONDS": "7"}).sticky_timeout_seconds == 7.0
    with pytest.raises(ConfigError, match="AGENT_WORKER_STICKY_TIMEOUT_SECONDS"):
        WorkerConfig.from_env({"AGENT_WORKER_STICKY_TIMEOUT_SECONDS": "0.5"})
    for seconds in (None, 7.0):
        extra = {} if seconds is None else {"sticky_timeout_seconds": seconds}
        workers = build_workers(client, make_config(tmp_path / f"data-{seconds}", **extra))
        settings = [w.config(active_config=True) for w in workers]
        waits = {s["sticky_queue_schedule_to_start_timeout"] for s in settings if s.get("workflows")}
        assert waits == {timedelta(seconds=seconds or 10.0)}
