"""Scorers of shadow runs (``shadow.score``): the LLM judge through the worker's own model
configuration, and a scorer that fails, which the report shows rather than retrying user code."""

from __future__ import annotations

import json
from pathlib import Path

from agent_worker.activities.shadow import ShadowActivities
from agent_worker.activities.stores.artifacts import build_artifact_store
from agent_worker.schemas.shadow import ShadowScoreInput
from temporalio.testing import ActivityEnvironment

from tests.helpers.openai_stub import OpenAIStub
from tests.helpers.support import make_config


def score_input(scorer: str) -> ShadowScoreInput:
    return ShadowScoreInput(
        scorer=scorer,
        task_id="t-1",
        prompt="Sum 2 and 3.",
        recorded="The sum is 5.",
        candidate="5",
    )


async def test_the_llm_judge_asks_the_worker_s_configured_model_and_reads_its_score(tmp_path: Path) -> None:
    """``--scorer agent_worker.activities.shadow_judge:judge`` sends the task, the recorded answer and the
    candidate's to the model the worker is configured with (here a real HTTP server speaking the
    OpenAI API) and returns the score on the first line of its answer, with the answer as detail."""
    with OpenAIStub() as stub:
        stub.reply_text("0.8\nRight number, terser than the reference.")
        config = make_config(tmp_path / "data", **stub.settings())
        activities = ShadowActivities(build_artifact_store(config), config)
        result = await ActivityEnvironment().run(
            activities.score, score_input("agent_worker.activities.shadow_judge:judge")
        )
        assert result.error is None and result.score == 0.8
        assert result.detail.endswith("terser than the reference.")
        [request] = stub.requests
        sent = json.dumps(request.body)
        assert "Sum 2 and 3." in sent and "The sum is 5." in sent and "Answer to grade" in sent


async def test_a_scorer_that_fails_is_reported_with_its_error_and_no_score(tmp_path: Path) -> None:
    """A scorer that cannot run (the judge with no real model provider) gives no score and names
    why, so the task's report row says 'error' instead of the whole shadow run failing."""
    config = make_config(tmp_path / "data")
    activities = ShadowActivities(build_artifact_store(config), config)
    result = await ActivityEnvironment().run(
        activities.score, score_input("agent_worker.activities.shadow_judge:judge")
    )
    assert result.score is None and result.error and "AgentError" in result.error
    missing = await ActivityEnvironment().run(activities.score, score_input("no.such.module:score"))
    assert missing.score is None and "cannot load scorer" in (missing.error or "")
