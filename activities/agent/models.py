"""Model providers for agent turns, and the base of deterministic scripted models.

Which model a turn uses is the agent's and the configuration's (``activities.agent.providers``):
real providers when any is configured, otherwise the agent's own scripted model, so that the demo
and the tests run with no key and no network.
"""

from __future__ import annotations

import abc
import json
from collections.abc import AsyncIterator
from typing import Any

from agent_worker.activities.agent.registry import AgentRegistration
from agent_worker.schemas.config import WorkerConfig
from agents.items import ModelResponse, TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
from agents.models.interface import Model
from agents.usage import Usage


class ConversationModel(Model, abc.ABC):
    """A deterministic model whose answer is a pure function of the conversation so far.

    Unlike a queue of scripted steps, it holds no state between calls, so a retried turn, a new
    worker process, or a resumed ``RunState`` all get the same answer for the same conversation.
    """

    @abc.abstractmethod
    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        """The output items for a conversation given as plain input-item dicts."""

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: Any,
        tools: Any,
        output_schema: Any,
        handoffs: Any,
        tracing: Any,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else [_plain(i) for i in input]
        output = self.respond(system_instructions, items)
        # A rough estimate (4 characters a token) so budgets and reports have figures to work with.
        input_tokens = len(json.dumps(items)) // 4
        output_tokens = sum(len(item.model_dump_json()) for item in output) // 4
        usage = Usage(
            requests=1,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            total_tokens=input_tokens + output_tokens,
        )
        return ModelResponse(output=output, usage=usage, response_id=None)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("scripted models do not stream")
        yield  # pragma: no cover


def _plain(item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        return item
    return item.model_dump(mode="json", exclude_none=True)


def tool_outputs(items: list[dict[str, Any]]) -> dict[str, str]:
    """The outputs seen so far, by tool name (the latest call of each tool wins)."""
    names = {i["call_id"]: i["name"] for i in items if i.get("type") == "function_call"}
    outputs: dict[str, str] = {}
    for item in items:
        if item.get("type") == "function_call_output" and item.get("call_id") in names:
            output = item.get("output")
            outputs[names[item["call_id"]]] = output if isinstance(output, str) else str(output)
    return outputs


def first_user_text(items: list[dict[str, Any]]) -> str:
    """The text of the first user message."""
    for item in items:
        if item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            return " ".join(part.get("text", "") for part in content or [] if isinstance(part, dict))
    return ""


def model_for(registration: AgentRegistration, config: WorkerConfig) -> tuple[Model, str]:
    """The model a turn of ``registration`` uses under ``config`` (its fallback chain, see
    ``activities.agent.providers``), and its first choice's name for the record.

    Raises:
        ConfigError: the agent's model cannot be resolved (unknown provider, missing setting).
        AgentError: no real provider is configured and the agent has no scripted model.
    """
    from agent_worker.activities.agent.providers import ModelChain, resolve_chain

    chain = resolve_chain(registration, registration.build(), config)
    return ModelChain(chain), chain[0].label
