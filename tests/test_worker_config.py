"""Worker configuration from ``AGENT_WORKER_*`` variables: read, refused naming the variable, and
never showing the OpenAI key."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.config import ConfigError, WorkerConfig


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
    per cached workflow (150 MB by default); AGENT_WORKER_MAX_CACHED_WORKFLOWS, even 0, wins. (The
    worker's use of it: tests/test_metrics.py evicts with a cache of one.)"""
    from schemas.config import MB_PER_CACHED_WORKFLOW

    assert WorkerConfig().workflow_cache_size == int(150 / MB_PER_CACHED_WORKFLOW)
    halved = WorkerConfig.from_env({"AGENT_WORKER_WORKFLOW_CACHE_MB": "75"})
    assert halved.workflow_cache_size == int(75 / MB_PER_CACHED_WORKFLOW)
    both = {"AGENT_WORKER_WORKFLOW_CACHE_MB": "75", "AGENT_WORKER_MAX_CACHED_WORKFLOWS": "0"}
    assert WorkerConfig.from_env(both).workflow_cache_size == 0
    with pytest.raises(ConfigError, match="AGENT_WORKER_WORKFLOW_CACHE_MB"):
        WorkerConfig.from_env({"AGENT_WORKER_WORKFLOW_CACHE_MB": "0"})
