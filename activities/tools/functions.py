"""Own functions as effect tools: an existing async function, one decorator, durable.

::

    @effect_tool(system="billing", key_parameter="idempotency_key", lookup=find_invoice)
    async def create_invoice(customer: str, amount_cents: int, idempotency_key: str) -> dict:
        '''Create an invoice for the customer.'''
        return await billing.invoices.create(customer, amount_cents, idempotency_key=idempotency_key)

The model sees a tool with the function's name, docstring and parameters (without the key
parameter). A call stops the agent turn like every effect: the policy and approval apply (it is a
``write`` action unless ``effect`` says otherwise). Then the workflow runs the function as its own
``tool.call`` activity, with the tool's own timeout and attempts, on the queue of its ``role``
(``business`` by default: the workers that hold the business systems' credentials). The operation
key, derived from the task and the call, goes into ``key_parameter``: the same on every retry.

When an attempt fails after the function may have acted (its worker died, the answer was lost), the
next attempt first calls ``lookup(key)``: a result other than None means the effect was made, and
it is returned instead of calling the function again. A function that refuses a call it certainly
did not carry out raises ``ToolError``: the model sees the message. Any other exception is retried;
when the attempts run out, the task hands off with the outcome unknown.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from agent_worker.activities.agent.tools import (
    EFFECT_ATTR,
    EffectDeclaration,
    return_workflow_result,
    validated,
)
from agent_worker.activities.errors import ToolPlanError
from agent_worker.schemas.actions import EffectClass, FunctionCall
from agents import FunctionTool
from agents.function_schema import FuncSchema, function_schema

_FUNCTION_ATTR = "_agent_worker_function"

Lookup = Callable[[str], Awaitable[Any] | Any]


@dataclass(frozen=True)
class FunctionDeclaration:
    """The function behind an effect tool, and how the ``tool.call`` activity runs it."""

    function: Callable[..., Any]
    schema: FuncSchema
    key_parameter: str | None
    lookup: Lookup | None


def effect_tool(
    func: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    system: str | None = None,
    key_parameter: str | None = None,
    lookup: Lookup | None = None,
    timeout_seconds: float = 60.0,
    max_attempts: int = 5,
    role: Literal["agent", "business"] = "business",
    effect: Literal["write", "sandbox"] = "write",
) -> Any:
    """Declare an own function (async or plain) with a side effect as a durable effect tool.

    Args:
        name: The tool's name (default: the function's).
        description: What the model reads (default: the docstring).
        system: The business system it acts on, by name (recorded in events and evidence).
        key_parameter: The parameter that receives the operation key (hidden from the model).
        lookup: ``lookup(key)``: the earlier result of a call made under ``key``, or None.
        timeout_seconds: How long one attempt may take.
        max_attempts: Attempts (Temporal's retries) before the task hands off.
        role: Which workers run it: ``business`` (default) or ``agent``.
        effect: The policy's class for it: ``write`` (default) or ``sandbox``.

    Raises:
        TypeError: ``key_parameter`` is not a parameter of the function, or the function takes the
            tool context.
    """

    def build(fn: Callable[..., Any]) -> FunctionTool:
        full = function_schema(fn, name_override=name, description_override=description)
        if full.takes_context:
            raise TypeError(f"{full.name}: an effect tool takes its arguments only, no context")
        shown = function_schema(
            _without(fn, key_parameter), name_override=full.name, description_override=description
        )
        call = FunctionCall(
            tool=full.name,
            system=system,
            arguments={},
            key_parameter=key_parameter,
            has_lookup=lookup is not None,
            timeout_seconds=timeout_seconds,
            max_attempts=max_attempts,
            role=role,
        )

        def plan(arguments: dict[str, Any]) -> FunctionCall:
            parsed = validated(shown, full.name, arguments)
            return call.model_copy(update={"arguments": json.loads(parsed.model_dump_json())})

        tool = FunctionTool(
            name=full.name,
            description=shown.description or "",
            params_json_schema=shown.params_json_schema,
            on_invoke_tool=return_workflow_result,
            strict_json_schema=shown.strict_json_schema,
            needs_approval=True,
        )
        setattr(tool, EFFECT_ATTR, EffectDeclaration(EffectClass(effect), plan, None, FunctionCall))
        setattr(tool, _FUNCTION_ATTR, FunctionDeclaration(fn, full, key_parameter, lookup))
        return tool

    return build(func) if func is not None else build


def function_of(tool: object) -> FunctionDeclaration | None:
    """The function behind ``tool`` when it was declared with ``effect_tool``."""
    return getattr(tool, _FUNCTION_ATTR, None)


def call_arguments(
    declaration: FunctionDeclaration, tool: str, arguments: dict[str, Any], key: str
) -> tuple[list[Any], dict[str, Any]]:
    """The function's call arguments: the planned ones, typed again, plus the operation key.

    Raises:
        ToolPlanError: the arguments no longer fit the function (it changed since the call was planned).
    """
    values = dict(arguments)
    if declaration.key_parameter is not None:
        values[declaration.key_parameter] = key
    return declaration.schema.to_call_args(validated(declaration.schema, tool, values))


def _without(fn: Callable[..., Any], parameter: str | None) -> Callable[..., Any]:
    """``fn`` as the model sees it: the same name, docstring and hints, without ``parameter``."""
    if parameter is None:
        return fn
    signature = inspect.signature(fn)
    if parameter not in signature.parameters:
        raise TypeError(f"{fn.__name__} has no parameter {parameter!r} for the operation key")

    @functools.wraps(fn)
    def shown(*args: Any, **kwargs: Any) -> Any:  # never called: only its signature is read
        raise ToolPlanError(f"{fn.__name__} runs as an activity, not here", operation="agent.turn")

    shown.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p for n, p in signature.parameters.items() if n != parameter]
    )
    shown.__annotations__ = {k: v for k, v in fn.__annotations__.items() if k != parameter}
    return shown
