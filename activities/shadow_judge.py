"""An LLM judge for shadow runs: ``--scorer agent_worker.activities.shadow_judge:judge``.

It has the scorer interface of every ``--scorer`` callable (keyword arguments ``task_id``,
``prompt``, ``recorded``, ``candidate``; a number or a ``(number, detail)`` pair), plus ``config``:
``shadow.score`` passes the worker's ``WorkerConfig`` to a scorer that names that parameter. The
judge asks the worker's configured model (``AGENT_WORKER_MODEL_PROVIDER``, ``AGENT_WORKER_OPENAI_MODEL``
and the rest: ``docs/models.md``), through the same provider code as agent turns, how well the
candidate's answer does the task compared with the recorded one, and reads a score from 0 to 1 from
its first line. With no real provider (``scripted``) it fails, and the report says so for the task.
"""

from __future__ import annotations

import re

from agent_worker.activities.agent.models import model_for
from agent_worker.activities.agent.registry import AgentRegistration
from agent_worker.schemas.config import WorkerConfig
from agents import Agent, RunConfig, Runner

JUDGE_INSTRUCTIONS = (
    "You grade an AI agent's answer to a task against a reference answer the agent gave before. "
    "Answer with a score from 0 to 1 on the first line (1: does the task at least as well as the "
    "reference; 0: wrong or useless), then one sentence saying why."
)
_SCORE = re.compile(r"(?<![\d.])(0(?:\.\d+)?|1(?:\.0+)?)(?![\d.])")

__all__ = ["JUDGE_INSTRUCTIONS", "judge"]


async def judge(
    *, task_id: str, prompt: str, recorded: str | None, candidate: str | None, config: WorkerConfig
) -> tuple[float, str]:
    """The judge's score (0 to 1) and its reason.

    Raises:
        ValueError: the model's answer holds no score from 0 to 1.
        AgentError: no real model provider is configured.
    """
    agent = Agent(name="shadow-judge", instructions=JUDGE_INSTRUCTIONS)
    model, _ = model_for(AgentRegistration(name="shadow-judge", build=lambda: agent), config)
    question = (
        f"Task:\n{prompt}\n\nReference answer:\n{recorded or '(none)'}\n\n"
        f"Answer to grade:\n{candidate or '(none)'}"
    )
    result = await Runner.run(
        agent, question, run_config=RunConfig(model=model, tracing_disabled=True), max_turns=1
    )
    text = str(result.final_output).strip()
    found = _SCORE.search(text.splitlines()[0] if text else "")
    if found is None:
        raise ValueError(f"the judge gave no score from 0 to 1: {text[:200]!r}")
    return float(found.group(1)), text
