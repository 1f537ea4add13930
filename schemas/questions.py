"""A question the agent asks a person (the built-in ``ask_human`` tool), and checking an answer.

A question is an operation like a sandbox command or a business write: the turn plans it from the
tool's arguments, the policy routes it (who may answer: a rule on tool ``ask_human`` or effect
``ask``), and the task waits for it durably as it waits for an approval. A person answers with the
decision ``answer``; the answer must fit the question's type:

- ``text``: a non-empty string;
- ``choice``: one of ``options``, exactly;
- ``form``: a JSON value valid against ``form`` (a JSON Schema, checked when the question is asked).

``answer_problem`` says why an answer does not fit, naming the failing field (``$.amount``); the
workflow refuses such an answer and the question stays open. Pure functions, no I/O: the workflow
calls them. A form's ``$ref`` resolves within the form only (an empty registry, nothing fetched).
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any, Literal

import jsonschema
import referencing
from pydantic import BaseModel, Field, model_validator

# Bounds: a question travels in the task's state, its request and its events.
MAX_QUESTION_CHARS = 4_000
MAX_OPTIONS = 50
MAX_OPTION_CHARS = 200
MAX_FORM_BYTES = 32_768
MAX_ANSWER_BYTES = 65_536
# Problems an answer's message names at most (a form can fail in many places at once).
MAX_PROBLEMS = 5

ASK_TOOL = "ask_human"
"""The built-in tool's name, as policy rules and the model see it."""


class AnswerType(StrEnum):
    """What kind of answer a question takes."""

    TEXT = "text"
    CHOICE = "choice"
    FORM = "form"


class Question(BaseModel):
    """A question for a person, planned from an ``ask_human`` call."""

    kind: Literal["human.ask"] = "human.ask"
    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS)
    answer_type: AnswerType = AnswerType.TEXT
    options: list[str] = Field(default_factory=list, description="For 'choice': the answers allowed.")
    form: dict[str, Any] | None = Field(
        default=None, description="For 'form': the JSON Schema the answer must satisfy."
    )

    @model_validator(mode="after")
    def _fits_its_type(self) -> Question:
        if self.answer_type is AnswerType.CHOICE:
            if len(self.options) < 2 or len(self.options) > MAX_OPTIONS:
                raise ValueError(f"a choice needs 2 to {MAX_OPTIONS} options, got {len(self.options)}")
            if len(set(self.options)) != len(self.options):
                raise ValueError("a choice's options must differ from each other")
            if any(not o or len(o) > MAX_OPTION_CHARS for o in self.options):
                raise ValueError(f"each option must have 1 to {MAX_OPTION_CHARS} characters")
        elif self.options:
            raise ValueError("options are only for answer_type 'choice'")
        if self.answer_type is AnswerType.FORM:
            if self.form is None:
                raise ValueError("a form needs form_schema (a JSON Schema object)")
            size = len(json.dumps(self.form, separators=(",", ":")))
            if size > MAX_FORM_BYTES:
                raise ValueError(f"the form's schema is {size:,} bytes, more than {MAX_FORM_BYTES:,}")
            try:
                jsonschema.validators.validator_for(self.form).check_schema(self.form)
            except jsonschema.SchemaError as err:
                raise ValueError(
                    f"form_schema is not a valid JSON Schema: {_path(err)}: {err.message}"
                ) from None
        elif self.form is not None:
            raise ValueError("form_schema is only for answer_type 'form'")
        return self


def answer_problem(question: Question, answer: Any) -> str | None:
    """Why ``answer`` does not fit ``question``, naming the failing field; None when it fits."""
    if answer is None:
        return "the answer is missing"
    size = len(json.dumps(answer, separators=(",", ":"), default=str))
    if size > MAX_ANSWER_BYTES:
        return f"the answer is {size:,} bytes as JSON, more than the {MAX_ANSWER_BYTES:,} allowed"
    if question.answer_type is AnswerType.TEXT:
        if not isinstance(answer, str) or not answer.strip():
            return "the question takes a text answer: a non-empty string"
        return None
    if question.answer_type is AnswerType.CHOICE:
        if answer not in question.options:
            return f"{answer!r} is not one of the options: {', '.join(map(repr, question.options))}"
        return None
    assert question.form is not None
    validator = jsonschema.validators.validator_for(question.form)(
        question.form, registry=referencing.Registry()
    )
    try:
        errors = sorted(validator.iter_errors(answer), key=lambda e: list(map(str, e.absolute_path)))
    except referencing.exceptions.Unresolvable as err:
        return f"the form's schema refers to {err.ref!r}, which is not within it"
    if not errors:
        return None
    problems = [f"{_path(e)}: {e.message}" for e in errors[:MAX_PROBLEMS]]
    more = f" (and {len(errors) - MAX_PROBLEMS} more)" if len(errors) > MAX_PROBLEMS else ""
    return "the answer does not fit the form: " + "; ".join(problems) + more


def answer_text(question: Question, answer: Any) -> str:
    """What the model reads as the tool's output: a text or a choice as it is, a form's answer as
    JSON."""
    if question.answer_type is AnswerType.FORM:
        return json.dumps(answer, sort_keys=True, ensure_ascii=False)
    return str(answer)


def _path(err: jsonschema.ValidationError | jsonschema.SchemaError) -> str:
    """The failing field as a JSON path (``$`` for the answer as a whole)."""
    path = "$"
    for part in err.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


__all__ = [
    "ASK_TOOL",
    "MAX_ANSWER_BYTES",
    "AnswerType",
    "Question",
    "answer_problem",
    "answer_text",
]
