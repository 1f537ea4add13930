"""Declaring tools with effects, and the services tools see inside a turn.

Read tools are ordinary OpenAI Agents SDK ``@function_tool``s: they run inside the turn. A tool with
an effect is one decorator away::

    @sandbox_tool
    def run_python(code: str) -> SandboxCommand:
        '''Run Python code in the task's sandbox.'''
        return SandboxCommand(argv=["python3", "-c", code])

    @write_tool
    def submit_report(month: str, report_digest: str) -> BusinessWrite:
        '''Store the approved report.'''
        return BusinessWrite(record_type="monthly_report", payload={...}, artifacts=[report_digest])

The decorated function is a *planner*: a pure function from the tool's arguments to the operation
the workflow will run. The SDK stops the run at the call (``needs_approval``), the workflow applies
policy and approval and runs the operation as its own activity, and when the run resumes the tool
returns the workflow's result for that call id: the model sees it as the tool's output.

A read tool's output reaches the model as it is up to ``OUTPUT_PREVIEW_CHARS`` characters; a longer
one as its head and a note naming the whole, which is kept in the artifact store
(``activities.agent.read_tools``).
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pydantic
from agent_worker.activities.artifacts import ArtifactStore
from agent_worker.activities.errors import ToolPlanError, TurnError
from agent_worker.schemas.actions import BusinessWrite, Delegation, EffectClass, Operation, SandboxCommand
from agent_worker.schemas.artifacts import ArtifactRef
from agents import FunctionTool
from agents.function_schema import FuncSchema, function_schema
from agents.tool_context import ToolContext

EFFECT_ATTR = "_agent_worker_effect"


@dataclass(frozen=True)
class EffectDeclaration:
    """What an effectful tool does, attached to its ``FunctionTool``.

    With a ``schema``, ``planner`` takes the tool's arguments as the function's parameters (checked
    against the schema first); without one, it takes the arguments as one dict and checks them
    itself (raising ``ToolPlanError``).
    """

    effect: EffectClass
    planner: Callable[..., Any]
    schema: FuncSchema | None
    returns: type[Operation]


@dataclass
class TurnServices:
    """What tools can use during one turn: inputs, artifacts, and the workflow's results."""

    store: ArtifactStore
    inputs: dict[str, ArtifactRef]
    outputs: dict[str, str] = field(default_factory=dict)  # the workflow's result text, by call id
    saved: list[ArtifactRef] = field(default_factory=list)
    # The digest of a read tool's whole output, by call id, when the model was given its head.
    whole_outputs: dict[str, str] = field(default_factory=dict)
    tenant: str = ""  # the task's tenant, as the workflow sent it (memory's scope)
    # The worker's memory store (``activities.stores.memory``), built on the first call.
    memory: Callable[[], Any] | None = None

    def read_input(self, name: str) -> bytes:
        """The content of the task input called ``name``."""
        ref = self.inputs.get(name)
        if ref is None:
            raise KeyError(f"no input named {name!r}; inputs: {sorted(self.inputs)}")
        return self.store.get(ref.digest)

    def save_artifact(self, name: str, data: bytes, media_type: str = "text/plain") -> ArtifactRef:
        """Store ``data`` as an artifact of this task and return its reference."""
        ref = self.store.ref(name, data, media_type)
        self.saved.append(ref)
        return ref


_current: contextvars.ContextVar[TurnServices] = contextvars.ContextVar("agent_worker_turn")


def current_turn() -> TurnServices:
    """The services of the turn running now. Only valid inside a tool called by ``agent.turn``."""
    try:
        return _current.get()
    except LookupError:
        raise TurnError("no agent turn is running in this context") from None


def running_turn() -> TurnServices | None:
    """The services of the turn running now, or None outside a turn."""
    return _current.get(None)


def bind_turn(services: TurnServices) -> contextvars.Token[TurnServices]:
    """Make ``services`` the current turn's services (``agent.turn`` does this)."""
    return _current.set(services)


def unbind_turn(token: contextvars.Token[TurnServices]) -> None:
    """Undo ``bind_turn``."""
    _current.reset(token)


async def return_workflow_result(ctx: ToolContext[Any], _arguments: str) -> str:
    output = current_turn().outputs.get(ctx.tool_call_id)
    if output is None:
        raise TurnError(f"the workflow sent no result for call {ctx.tool_call_id}")
    return output


def _effect_tool(
    effect: EffectClass,
    returns: type[SandboxCommand] | type[BusinessWrite] | type[Delegation],
    func: Callable[..., Any] | None,
    name: str | None,
    description: str | None,
) -> Any:
    def build(fn: Callable[..., Any]) -> FunctionTool:
        schema = function_schema(fn, name_override=name, description_override=description)
        if schema.takes_context:
            raise TypeError(f"{schema.name}: a planner takes the tool's arguments only, no context")
        tool = FunctionTool(
            name=schema.name,
            description=schema.description or "",
            params_json_schema=schema.params_json_schema,
            on_invoke_tool=return_workflow_result,
            strict_json_schema=schema.strict_json_schema,
            needs_approval=True,
        )
        setattr(tool, EFFECT_ATTR, EffectDeclaration(effect, fn, schema, returns))
        return tool

    return build(func) if func is not None else build


def sandbox_tool(
    func: Callable[..., SandboxCommand] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Any:
    """Declare a tool whose calls run as commands in the task's sandbox (a ``SandboxCommand``)."""
    return _effect_tool(EffectClass.SANDBOX, SandboxCommand, func, name, description)


def write_tool(
    func: Callable[..., BusinessWrite] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Any:
    """Declare a tool whose calls are business writes (a ``BusinessWrite``), run exactly once."""
    return _effect_tool(EffectClass.WRITE, BusinessWrite, func, name, description)


def delegate_tool(
    func: Callable[..., Delegation] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Any:
    """Declare a tool whose calls hand a sub-task to another agent (a ``Delegation``), run as a child
    task; the child's outcome, success or failure, comes back as the tool's output."""
    return _effect_tool(EffectClass.DELEGATE, Delegation, func, name, description)


def effect_of(tool: object) -> EffectDeclaration | None:
    """The effect declaration of ``tool``, or None for a read tool."""
    return getattr(tool, EFFECT_ATTR, None)


def plan_call(tool: FunctionTool, arguments: dict[str, Any]) -> Operation:
    """Validate ``arguments`` against the tool's schema and plan its operation.

    Raises:
        ToolPlanError: the tool has no effect, the arguments are invalid, or the planner failed.
    """
    declaration = effect_of(tool)
    if declaration is None:
        raise ToolPlanError(f"tool {tool.name!r} has no declared effect", operation="agent.plan")
    try:
        if declaration.schema is None:
            operation = declaration.planner(arguments)
        else:
            args, kwargs = declaration.schema.to_call_args(
                validated(declaration.schema, tool.name, arguments)
            )
            operation = declaration.planner(*args, **kwargs)
    except ToolPlanError:
        raise
    except Exception as err:
        raise ToolPlanError(f"{tool.name} could not plan the call: {err}", operation="agent.plan") from err
    if not isinstance(operation, declaration.returns):
        raise ToolPlanError(
            f"{tool.name} must return a {declaration.returns.__name__}, got {type(operation).__name__}",
            operation="agent.plan",
        )
    return operation


def validated(schema: FuncSchema, tool: str, arguments: dict[str, Any]) -> pydantic.BaseModel:
    """``arguments`` checked against a tool's parameters.

    Raises:
        ToolPlanError: naming each invalid argument and what is wrong with it.
    """
    try:
        return schema.params_pydantic_model(**arguments)
    except pydantic.ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in err.errors()
        )
        raise ToolPlanError(f"invalid arguments for {tool}: {problems}", operation="agent.plan") from None


def parse_arguments(raw: str) -> dict[str, Any]:
    """Parse a model's JSON tool arguments into an object."""
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError as err:
        raise ToolPlanError(f"tool arguments are not JSON: {err}", operation="agent.turn") from None
    if not isinstance(value, dict):
        raise ToolPlanError("tool arguments must be a JSON object", operation="agent.turn")
    return value
