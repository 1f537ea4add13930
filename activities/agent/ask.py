"""The built-in ``ask_human`` tool: the agent asks a person and reads the answer as the tool's output.

Add it to an agent like any tool (``Agent(tools=[..., ask_human])``; ``from agent_worker import
ask_human``). It is opt-in rather than given to every agent: a tool list is part of what a model
reads, so an agent that never asks keeps the prompt it had. A call stops the turn like any tool
with an effect; the workflow routes the question by policy (a rule on tool ``ask_human`` or effect
``ask`` names who may answer), waits for the answer durably as for an approval, and the next turn
reads the answer as the call's output (``schemas.questions``):

- ``answer_type`` ``text`` (the default): any non-empty text;
- ``choice``: one of ``options``;
- ``form``: a JSON value valid against ``form_schema`` (a JSON Schema); the model reads it as JSON.

A call whose arguments do not make a question (a choice without options, a schema that is not
one) goes back to the model as a tool error, naming what is wrong.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic
from agent_worker.activities.agent.tools import EFFECT_ATTR, EffectDeclaration, return_workflow_result
from agent_worker.activities.errors import ToolPlanError
from agent_worker.schemas.actions import EffectClass
from agent_worker.schemas.questions import ASK_TOOL, MAX_OPTIONS, AnswerType, Question
from agents import FunctionTool

DESCRIPTION = (
    "Ask a person a question and wait for the answer, which is this tool's output. Use it when you "
    "need a decision, a fact or a value only a person can give. answer_type 'text' takes free text; "
    "'choice' takes exactly one of options; 'form' takes a JSON value valid against form_schema "
    "(a JSON Schema), returned as JSON."
)

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "question": {"type": "string", "description": "The question, as the person will read it."},
        "answer_type": {
            "type": "string",
            "enum": [t.value for t in AnswerType],
            "description": "text (default), choice or form.",
        },
        "options": {
            "type": "array",
            "items": {"type": "string"},
            "maxItems": MAX_OPTIONS,
            "description": "For choice: the answers the person may pick from.",
        },
        "form_schema": {
            "type": "object",
            "description": "For form: a JSON Schema the answer must satisfy.",
        },
    },
    "required": ["question"],
    "additionalProperties": False,
}


def plan_question(arguments: dict[str, Any]) -> Question:
    """The question an ``ask_human`` call asks.

    Raises:
        ToolPlanError: the arguments make no question, naming what is wrong.
    """
    unknown = sorted(set(arguments) - set(PARAMETERS["properties"]))
    if unknown:
        raise ToolPlanError(f"{ASK_TOOL} takes no argument {', '.join(unknown)}", operation="agent.plan")
    form = arguments.get("form_schema")
    if isinstance(form, str):  # a model may send the schema as JSON text
        try:
            form = json.loads(form)
        except json.JSONDecodeError as err:
            raise ToolPlanError(f"form_schema is not JSON: {err}", operation="agent.plan") from None
    try:
        return Question(
            question=arguments.get("question", ""),
            answer_type=arguments.get("answer_type") or AnswerType.TEXT,
            options=arguments.get("options") or [],
            form=form,
        )
    except pydantic.ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in err.errors()
        )
        raise ToolPlanError(f"invalid arguments for {ASK_TOOL}: {problems}", operation="agent.plan") from None


def _ask_human() -> FunctionTool:
    tool = FunctionTool(
        name=ASK_TOOL,
        description=DESCRIPTION,
        params_json_schema=PARAMETERS,
        on_invoke_tool=return_workflow_result,
        strict_json_schema=False,  # optional arguments and an open form schema
        needs_approval=True,
    )
    setattr(tool, EFFECT_ATTR, EffectDeclaration(EffectClass.ASK, plan_question, None, Question))
    return tool


ask_human: FunctionTool = _ask_human()
"""The built-in ``ask_human`` tool, to put in an agent's ``tools``."""

__all__ = ["ask_human", "plan_question"]
