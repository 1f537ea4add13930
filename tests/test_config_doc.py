"""docs/configuration.md is generated from the configuration model (scripts/config_doc.py) and says
what the model does: every setting, its variables and its default."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from agent_worker.schemas.config import ENV_PREFIX, WorkerConfig

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "config_doc.py"


def load_generator():
    spec = importlib.util.spec_from_file_location("config_doc", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_configuration_doc_is_what_the_generator_produces_from_the_model() -> None:
    """A change to WorkerConfig without regenerating the doc fails here (run scripts/config_doc.py)."""
    committed = (REPO / "docs" / "configuration.md").read_text()
    assert committed == load_generator().render(), "docs/configuration.md is stale: run scripts/config_doc.py"


def test_the_generator_check_mode_fails_on_a_stale_doc_and_passes_on_a_fresh_one(tmp_path: Path) -> None:
    """`config_doc.py --check` exits 1 when the file differs from the model and 0 when it matches."""
    generator = load_generator()
    generator.OUTPUT = tmp_path / "configuration.md"
    generator.REPO = tmp_path
    generator.OUTPUT.write_text(generator.render().replace("`agent-tasks`", "`another-queue`"))
    assert generator.main(["--check"]) == 1
    assert generator.main([]) == 0
    assert generator.main(["--check"]) == 0
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_setting_has_an_entry_with_its_variable_its_default_and_a_description() -> None:
    """No field of WorkerConfig is left out of the doc or left without a sentence saying what it does."""
    generator = load_generator()
    text = generator.render()
    for name, info in WorkerConfig.model_fields.items():
        assert f"### `{name}`" in text, name
        assert f"`{ENV_PREFIX}{name.upper()}`" in text, name
        assert (info.description or generator.FALLBACK.get(name, "")).strip(), f"{name} has no description"
    assert set(generator.FALLBACK) <= set(WorkerConfig.model_fields), "a fallback names no field"
    assert "`agent-worker-sandbox:bookworm`" in text and "`when_needed`" in text


@pytest.mark.parametrize(
    "field,variable", [(f, v) for f, names in load_generator().ALIASES.items() for v in names]
)
def test_each_other_variable_the_doc_names_really_sets_its_setting(field: str, variable: str) -> None:
    """The doc's non-prefixed variables (OPENAI_API_KEY, E2B_DOMAIN ...) are the ones from_env reads."""
    config = WorkerConfig.from_env({variable: "http://example.invalid/value"})
    value = getattr(config, field)
    value = value.get_secret_value() if hasattr(value, "get_secret_value") else value
    assert value == "http://example.invalid/value"
