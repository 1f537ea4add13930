"""Hypothesis strategies for fuzzing the task's entry points with JSON.

Three kinds of input: fully arbitrary JSON values (recursive); mutations of a valid payload (a
field dropped, retyped, oversized, swapped for odd unicode or for a plausible token of the contract,
wrapped in junk, an unknown key added, a list item repeated), so that inputs get past the first
check and deep into validation; and valid variants whose values are drawn from the schema's own
types and bounds, extremes included, so that inputs get past validation and into the workflow.
Every value is plain JSON, as any Temporal client could send it.
"""

from __future__ import annotations

import copy
import json
import types
from collections.abc import Callable
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Union, get_args, get_origin

from agent_worker.schemas.sandbox import SandboxSpec
from agent_worker.schemas.tasks import Budgets, TaskSpec, TaskState
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic.fields import FieldInfo

# A mutated payload bigger than this (as JSON) is not sent: far over any real decision or spec, well
# under Temporal's 2 MB payload limit, and it keeps the fuzzed task's history small.
MAX_PAYLOAD_BYTES = 256 * 1024

# Deeper than the SDK's payload decoder takes (about 200 levels: pydantic's JSON recursion limit),
# and a little deeper than the pydantic client encodes (254), so both refusals are exercised.
MAX_NESTING = 260

# Tokens the contracts give meaning to: enum values, names, digests, limits. Swapping one in makes a
# mutation plausible enough to reach the checks behind the first one. "docker" is left out on
# purpose: a valid spec asking for it would start containers on a machine that has a daemon.
TOKENS: list[Any] = [
    "",
    " ",
    "monthly-report",
    "shell",
    "no-such-agent",
    "finance-lead",
    "intern",
    "approve",
    "edit",
    "reject",
    "allow",
    "deny",
    "require_approval",
    "read",
    "sandbox",
    "write",
    "delegate",
    "auto",
    "process",
    "e2b",
    "received",
    "initializing",
    "running",
    "awaiting_approval",
    "completed",
    "handed_off",
    "continue",
    "end",
    "reapprove",
    "hand_off",
    "req-1",
    "req-99",
    "sha256:" + "0" * 64,
    "sha256:" + "a" * 63,
    "../etc/passwd",
    ".hidden",
    "null",
    "2026-10-31T00:00:00Z",
    0,
    -1,
    1,
    49,
    50,
    2**31,
    2**63,
    2**64,
    10**30,
    0.5,
    -0.0,
    1e-300,
    1e12,
    1e308,
    True,
    False,
    None,
    [],
    {},
]

# Unicode that breaks naive handling: NUL, bidi override, BOM, zero-width joiner, combining marks,
# astral planes, case-folding surprises, and the highest code point.
ODD_TEXT = [
    "\x00",
    "a\x00b",
    "\u202eevil",
    "\ufeffbom",
    "\u200d",
    "e\u0301\u0301\u0301",
    "🙂👩‍👩‍👧",
    "\U0010ffff",
    "İıſß",
    "ﷺ" * 50,
    "\r\n\t",
    "名前",
]

_keys = st.text(max_size=12) | st.sampled_from([t for t in TOKENS if isinstance(t, str)])

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
    | st.sampled_from(TOKENS)
    | st.sampled_from(ODD_TEXT)
)


def json_values(max_leaves: int = 25) -> st.SearchStrategy[Any]:
    """Any JSON value: scalars, and lists and objects of them, nested."""
    return st.recursive(
        json_scalars,
        lambda children: st.lists(children, max_size=6) | st.dictionaries(_keys, children, max_size=6),
        max_leaves=max_leaves,
    )


odd_text = (
    st.sampled_from(ODD_TEXT)
    | st.text(min_size=1, max_size=60)
    | st.text(alphabet=st.characters(min_codepoint=0x80), min_size=1, max_size=30)
)


def _nested(value: Any, depth: int, as_list: bool) -> Any:
    for _ in range(depth):
        value = [value] if as_list else {"x": value}
    return value


@st.composite
def oversized(draw: st.DrawFn, current: Any) -> Any:
    """A bigger version of ``current``: a long string, a huge number, a long list, a wide object, or
    the value buried deep."""
    kind = draw(st.sampled_from(["text", "number", "list", "object", "deep"]))
    if kind == "text":
        unit = draw(st.sampled_from(["x", "é", "🙂", "\x00", str(current)[:20] or "y"]))
        length = draw(st.sampled_from([257, 4_097, 20_000, 100_001]))
        return (unit * length)[:length]
    if kind == "number":
        return draw(st.sampled_from([2**64, -(2**64), 10**40, 1e308, -1e308, 5e-324, 2**53 + 1]))
    if kind == "list":
        return [copy.deepcopy(current) for _ in range(draw(st.sampled_from([64, 300])))]
    if kind == "object":
        return {f"k{i}": copy.deepcopy(current) for i in range(draw(st.sampled_from([64, 300])))}
    return _nested(current, draw(st.integers(2, MAX_NESTING)), draw(st.booleans()))


# ---- mutations --------------------------------------------------------------------------------

Path = tuple[Any, ...]


def _locations(doc: Any, prefix: Path = ()) -> list[Path]:
    """Every location below ``doc`` that holds a value."""
    if isinstance(doc, dict):
        items = list(doc.items())
    elif isinstance(doc, list):
        items = list(enumerate(doc))
    else:
        return []
    found = []
    for key, value in items:
        found.append((*prefix, key))
        found.extend(_locations(value, (*prefix, key)))
    return found


def _containers(doc: Any, kind: type) -> list[Path]:
    """Locations (the root included) holding a dict, or a list."""
    paths = [()] if isinstance(doc, kind) else []
    return paths + [p for p in _locations(doc) if isinstance(_get(doc, p), kind)]


def _get(doc: Any, path: Path) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _replace(draw: st.DrawFn, doc: Any, make: Callable[[Any], st.SearchStrategy[Any]]) -> Any:
    """Replace one value (the root when ``doc`` is a scalar) with a value drawn from ``make(old)``."""
    paths = _locations(doc)
    if not paths:
        return draw(make(doc))
    path = draw(st.sampled_from(paths))
    parent = _get(doc, path[:-1])
    parent[path[-1]] = draw(make(parent[path[-1]]))
    return doc


def _drop(draw: st.DrawFn, doc: Any) -> Any:
    paths = _locations(doc)
    if not paths:
        return doc
    path = draw(st.sampled_from(paths))
    parent = _get(doc, path[:-1])
    if isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent.pop(path[-1])
    return doc


def _add_key(draw: st.DrawFn, doc: Any) -> Any:
    paths = _containers(doc, dict)
    if paths:
        _get(doc, draw(st.sampled_from(paths)))[draw(_keys)] = draw(json_values(8))
    return doc


def _repeat_item(draw: st.DrawFn, doc: Any) -> Any:
    paths = [p for p in _containers(doc, list) if _get(doc, p)]
    if paths:
        items = _get(doc, draw(st.sampled_from(paths)))
        items.append(copy.deepcopy(draw(st.sampled_from(items))))
    return doc


def _token_like(old: Any) -> st.SearchStrategy[Any]:
    """A token of the same JSON type as ``old`` where there is one (so the swap is plausible), else any."""
    same = [t for t in TOKENS if type(t) is type(old)]
    return st.sampled_from(same or TOKENS)


def _wrap(old: Any) -> st.SearchStrategy[Any]:
    return st.sampled_from([[old], {"value": old}, [old, old], {"": old, "junk": [None, {}]}])


_MUTATIONS: list[Callable[[st.DrawFn, Any], Any]] = [
    _drop,
    _add_key,
    _repeat_item,
    lambda draw, doc: _replace(draw, doc, lambda old: json_values(10)),  # retype
    lambda draw, doc: _replace(draw, doc, _token_like),
    lambda draw, doc: _replace(draw, doc, lambda old: odd_text),
    lambda draw, doc: _replace(draw, doc, oversized),
    lambda draw, doc: _replace(draw, doc, _wrap),
]


@st.composite
def mutations_of(draw: st.DrawFn, valid: Any, max_mutations: int = 4) -> Any:
    """``valid`` with one to ``max_mutations`` mutations applied, each at a drawn location."""
    doc = copy.deepcopy(valid)
    for _ in range(draw(st.integers(1, max_mutations))):
        mutated = draw(st.sampled_from(_MUTATIONS))(draw, copy.deepcopy(doc))
        if json_size(mutated) <= MAX_PAYLOAD_BYTES:
            doc = mutated
    return doc


def json_size(value: Any) -> int:
    """The length of ``value`` as compact JSON."""
    return len(json.dumps(value, separators=(",", ":")))


def payloads(*valid: Any) -> st.SearchStrategy[Any]:
    """Arbitrary JSON, or a mutation of one of the ``valid`` payloads (mostly the latter: it gets
    further)."""
    mutated = st.sampled_from(valid).flatmap(mutations_of)
    return st.one_of(json_values(), mutated, mutated, mutated)


# ---- values the schema allows -----------------------------------------------------------------


def schema_values(
    model: type[BaseModel], avoid: frozenset[Any] = frozenset()
) -> st.SearchStrategy[dict[str, Any]]:
    """Objects for ``model``: a drawn subset of its scalar fields (and nested models), each value drawn
    from what the field's type and bounds allow, extremes included. Read from the model, so the fuzz
    follows the schema as it grows. Enum values in ``avoid`` are never drawn."""
    fields = {}
    for name, field in model.model_fields.items():
        strategy = _field_values(field, avoid)
        if strategy is not None:
            fields[field.alias or name] = strategy
    return st.fixed_dictionaries({}, optional=fields)


def _field_values(
    field: FieldInfo, avoid: frozenset[Any], nested: bool = True
) -> st.SearchStrategy[Any] | None:
    annotation, optional = field.annotation, False
    if get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        optional = len(members) < len(get_args(annotation))
        if len(members) != 1:
            return None
        annotation = members[0]
    bounds: dict[str, Any] = {}
    for constraint in field.metadata:
        for name in ("ge", "gt", "le", "lt"):
            if getattr(constraint, name, None) is not None:
                bounds[name] = getattr(constraint, name)
    low, high = bounds.get("ge", bounds.get("gt")), bounds.get("le", bounds.get("lt"))
    strategy: st.SearchStrategy[Any]
    if annotation is bool:
        strategy = st.booleans()
    elif annotation is int:
        strategy = st.integers(
            None if low is None else low + ("gt" in bounds), None if high is None else high - ("lt" in bounds)
        )
    elif annotation is float:
        strategy = st.floats(
            low,
            high,
            exclude_min="gt" in bounds,
            exclude_max="lt" in bounds,
            allow_nan=False,
            allow_infinity=False,
        )
    elif annotation is str:
        strategy = st.text(max_size=20) | st.sampled_from(ODD_TEXT)
    elif annotation is datetime:
        strategy = st.datetimes(timezones=st.just(UTC)).map(datetime.isoformat)
    elif isinstance(annotation, type) and issubclass(annotation, Enum):
        strategy = st.sampled_from([e.value for e in annotation if e.value not in avoid])
    elif nested and isinstance(annotation, type) and issubclass(annotation, BaseModel):
        strategy = schema_values(annotation, avoid)
    else:
        return None
    return strategy | st.none() if optional else strategy


def spec_variants(
    spec: dict[str, Any], avoid: frozenset[Any] = frozenset()
) -> st.SearchStrategy[dict[str, Any]]:
    """``spec`` (a valid TaskSpec) with its budgets, sandbox and continue-as-new limit drawn from what
    the schema allows: input that is valid, so it runs, with extreme values in it."""
    limit = _field_values(TaskSpec.model_fields["continue_as_new_after_events"], avoid)
    assert limit is not None
    return st.builds(
        lambda budgets, sandbox, top: {
            **spec,
            "budgets": {**spec.get("budgets", {}), **budgets},
            "sandbox": {**spec.get("sandbox", {}), **sandbox},
            **top,
        },
        schema_values(Budgets, avoid),
        schema_values(SandboxSpec, avoid),
        st.fixed_dictionaries({}, optional={"continue_as_new_after_events": limit}),
    )


def task_inputs(spec: dict[str, Any], avoid: frozenset[Any] = frozenset()) -> st.SearchStrategy[Any]:
    """Workflow inputs: arbitrary JSON and mutations of ``spec`` (bare, wrapped, with a state), valid
    variants of it, and variants carrying a state drawn from TaskState's schema."""
    state = {"schema_version": 1, "phase": "received", "turn": 0, "follow_ups": [], "usage": {"turns": 0}}
    variants = spec_variants(spec, avoid)
    return st.one_of(
        payloads(spec, {"spec": spec}, {"spec": spec, "state": state}),
        variants,
        st.builds(lambda s, t: {"spec": s, "state": t}, variants, schema_values(TaskState, avoid)),
    )
