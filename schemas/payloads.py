"""How payloads are written: the SDK's pydantic JSON, with the internal payloads compact.

Every agent turn and sandbox command puts its input and result in the task's history, so their
bytes are paid once per step, for the whole life of the task. A model marked ``compact_payload``
(an activity's own input or result, which no other program reads) is written without the fields
that hold their default value: reading it back fills them in again, so the value is the same and
so is every decision the workflow takes from it (nothing to replay differently, no patch). A field
typed ``Literal`` is always written: it may be a union's tag (``Operation.kind``), which the reader
needs before it knows the type, and pydantic's own ``exclude_defaults`` would drop it. (The schemas
have no "before" validators that fill a missing field from the others; one would break this.) In the
example of ``bench.vs_plugin`` (a turn and its command a step) that is 543 of the 4,480 bytes a step
added to the history: ``agent.turn``'s input 655 → 559, its result 943 → 636, the command record
798 → 658. What other programs read (a task's input and result, signals, updates, queries, events)
stays whole: a client in another language may expect every field.

Decoding is unchanged, so a worker from before reads these payloads, and this converter reads
theirs.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal, get_origin

import temporalio.api.common.v1
from pydantic import BaseModel
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter, pydantic_data_converter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    EncodingPayloadConverter,
    JSONPlainPayloadConverter,
)


def is_compact(value: Any) -> bool:
    """Whether ``value`` is written without its defaults (a model marked ``compact_payload``)."""
    return isinstance(value, BaseModel) and getattr(type(value), "compact_payload", False) is True


# A field's default as ``defaults_of`` compares it: (made by a factory, the value or the factory).
_Default = tuple[bool, Any]


@functools.cache
def _defaults(cls: type[BaseModel]) -> dict[str, _Default | None]:
    """Each field's default, or None where none may be left out (required, ``Literal``, or a factory
    that reads the other fields). Worked out once per class: pydantic's ``get_default`` inspects a
    factory's signature on every call, which was most of the cost of writing a payload."""
    found: dict[str, _Default | None] = {}
    for name, field in cls.model_fields.items():
        if field.is_required() or get_origin(field.annotation) is Literal:
            found[name] = None
        elif field.default_factory is None:
            found[name] = (False, field.default)
        elif field.default_factory_takes_validated_data:
            found[name] = None
        else:
            found[name] = (True, field.default_factory)
    return found


def defaults_of(model: BaseModel) -> dict[Any, Any]:
    """The ``exclude`` of ``model.model_dump``: every field at its default, at any depth, but those
    typed ``Literal`` (a union's tag is one)."""
    spec: dict[Any, Any] = {}
    for name, default in _defaults(type(model)).items():
        value = getattr(model, name)
        if default is not None:
            made, given = default
            default_value = given() if made else given
            if type(value) is type(default_value) and value == default_value:
                spec[name] = True
                continue
        if nested := _nested_defaults(value):
            spec[name] = nested
    return spec


def _nested_defaults(value: Any) -> dict[Any, Any] | None:
    if isinstance(value, BaseModel):
        return defaults_of(value) or None
    if isinstance(value, list | tuple):
        return {i: spec for i, item in enumerate(value) if (spec := _nested_defaults(item))} or None
    if isinstance(value, dict):
        return {k: spec for k, item in value.items() if (spec := _nested_defaults(item))} or None
    return None


class CompactJSONPayloadConverter(PydanticJSONPlainPayloadConverter):
    """``json/plain`` as the SDK's pydantic converter writes it, but compact models without defaults."""

    def to_payload(self, value: Any) -> temporalio.api.common.v1.Payload | None:
        if is_compact(value):
            data = value.model_dump_json(exclude=defaults_of(value), by_alias=True)
            return temporalio.api.common.v1.Payload(
                metadata={"encoding": self.encoding.encode()}, data=data.encode()
            )
        return super().to_payload(value)


# Made once, as the SDK's ``DefaultPayloadConverter`` makes its own: the SDK builds a converter for
# every serialization context (each payload of a workflow activation), through the constructor below.
_COMPACT_JSON = CompactJSONPayloadConverter()
_CONVERTERS: tuple[EncodingPayloadConverter, ...] = tuple(
    _COMPACT_JSON if isinstance(c, JSONPlainPayloadConverter) else c
    for c in DefaultPayloadConverter.default_encoding_payload_converters
)


class CompactPayloadConverter(CompositePayloadConverter):
    """The SDK's default payload converters, with ``CompactJSONPayloadConverter`` for JSON."""

    def __init__(self) -> None:
        super().__init__(*_CONVERTERS)


# The project's plain data converter (``security.codec.data_converter`` adds encryption to it).
DATA_CONVERTER: DataConverter = dataclasses.replace(
    pydantic_data_converter, payload_converter_class=CompactPayloadConverter
)

__all__ = [
    "DATA_CONVERTER",
    "CompactJSONPayloadConverter",
    "CompactPayloadConverter",
    "defaults_of",
    "is_compact",
]
