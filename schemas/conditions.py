"""Policy rule conditions: CEL (Common Expression Language) expressions over one proposed action.

A rule's ``when`` is a CEL expression (https://github.com/google/cel-spec), compiled and evaluated by
``cel-python`` (``celpy``): a small, side-effect-free language with no clock, randomness, I/O or
loops, so the same expression over the same action answers the same everywhere, which lets the
workflow evaluate it (and replays repeat it). Its names:

- ``args``: the tool call's arguments (a map; ``args.amount``, ``args["path"]``);
- ``tool``: the tool's name; ``effect``: its effect class (``"write"``, ``"sandbox"``, ...);
- ``agent``: the task's registered agent; ``caller``: the SDK agent that made the call (after a
  handoff, the specialist; ``""`` when unknown);
- ``tenant``: the task's tenant; ``labels``: the task's labels (a map of strings).

An expression is compiled when its rule is validated (a syntax error or an unknown name refuses
the task at start, naming the rule), and each compiled program is cached per expression string.
An expression that fails while it runs (a missing argument, a type mismatch, a result that is not
a boolean) yields a ``ConditionError`` with a deterministic message: the policy then fails closed
(``workflows.policy``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

# Names an expression may use; anything else is refused when the rule is validated.
CONDITION_NAMES = ("args", "tool", "effect", "agent", "caller", "tenant", "labels")
MAX_CONDITION_CHARS = 2000
_MAX_MESSAGE_CHARS = 200
_PROGRAM_CACHE = 256
_CEL_CLASS = re.compile(r"<class 'celpy\.celtypes\.(\w+?)Type'>")


class ConditionError(ValueError):
    """A condition could not be compiled (raised at validation) or evaluated (returned, never raised,
    by ``evaluate_condition``); the message is deterministic and bounded."""


def warm_conditions() -> None:
    """Build CEL's parser now, outside any workflow activation. celpy builds its grammar once per
    process on first use (about a second here, several under load) and keeps it on its parser class,
    which the workflow sandbox passes through; built inside an activation, that time counts against
    the deadlock window (a replay with the SDK's 2 s window failed on it under load)."""
    compile_condition("true")


@lru_cache(maxsize=_PROGRAM_CACHE)
def compile_condition(expression: str) -> Any:
    """The compiled CEL program for ``expression``, cached (the same string, the same program).

    Raises:
        ConditionError: the expression does not parse, or uses a name outside ``CONDITION_NAMES``.
    """
    import celpy  # imported on first use: schema users that never see a condition do not pay for it

    if len(expression) > MAX_CONDITION_CHARS:
        raise ConditionError(f"longer than {MAX_CONDITION_CHARS} characters")
    environment = celpy.Environment()
    try:
        program = environment.program(environment.compile(expression))
    except celpy.CELParseError as err:
        raise ConditionError(f"does not parse: {_first_line(str(err))}") from None
    except Exception as err:  # the parser's own limits (nesting too deep, ...): refused the same way
        raise ConditionError(f"does not compile: {_first_line(f'{type(err).__name__}: {err}')}") from None
    # An unknown name (a typo such as ``arg.amount``) is found by evaluating once over empty values:
    # the interpreter answers "undeclared reference" for it whatever the arguments are.
    problem = _run(program, _activation({}, "", "", "", "", "", {}))
    if isinstance(problem, ConditionError) and "undeclared reference" in str(problem):
        raise ConditionError(f"{problem} (names: {', '.join(CONDITION_NAMES)})")
    return program


def evaluate_condition(
    expression: str,
    *,
    args: Mapping[str, Any],
    tool: str,
    effect: str,
    agent: str,
    caller: str,
    tenant: str,
    labels: Mapping[str, str],
) -> bool | ConditionError:
    """Whether the action satisfies ``expression``, or why that could not be told."""
    try:
        program = compile_condition(expression)
    except ConditionError as err:  # validated models never get here; a hand-built one might
        return err
    return _run(program, _activation(args, tool, effect, agent, caller, tenant, labels))


def _activation(
    args: Mapping[str, Any],
    tool: str,
    effect: str,
    agent: str,
    caller: str,
    tenant: str,
    labels: Mapping[str, str],
) -> dict[str, Any]:
    import celpy

    values = {
        "args": dict(args),
        "tool": tool,
        "effect": effect,
        "agent": agent,
        "caller": caller,
        "tenant": tenant,
        "labels": dict(labels),
    }
    return {name: celpy.json_to_cel(value) for name, value in values.items()}


def _run(program: Any, activation: dict[str, Any]) -> bool | ConditionError:
    import celpy

    try:
        result = program.evaluate(activation)
    except celpy.CELEvalError as err:
        return ConditionError(_eval_message(err))
    except Exception as err:  # the interpreter's own failures are failures of this condition too
        return ConditionError(_first_line(f"{type(err).__name__}: {err}"))
    if isinstance(result, celpy.CELEvalError):
        return ConditionError(_eval_message(result))
    if not isinstance(result, bool | celpy.celtypes.BoolType):
        return ConditionError(f"the result is {_type_name(type(result))}, not a boolean")
    return bool(result)


def _eval_message(err: Exception) -> str:
    # The interpreter's message may carry the whole activation, with object addresses that differ
    # between processes: keep the part before it, so replays record the same reason.
    text = str(err.args[0]) if err.args else type(err).__name__
    text = _CEL_CLASS.sub(lambda m: m.group(1).lower(), text.split(" (in activation", 1)[0])
    return _first_line(text)


def _type_name(cls: type) -> str:
    return cls.__name__.removesuffix("Type").lower()


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "error"
    return line[:_MAX_MESSAGE_CHARS]


__all__ = [
    "warm_conditions",
    "CONDITION_NAMES",
    "MAX_CONDITION_CHARS",
    "ConditionError",
    "compile_condition",
    "evaluate_condition",
]
