"""Questions and their answers without a server: what `ask_human` accepts as a question, how an
answer is checked against its type, what a decision carrying an answer or a respond must hold, and
that a signature covers the answer."""

from __future__ import annotations

from typing import Any

import pytest
from agent_worker.activities.agent.ask import plan_question
from agent_worker.activities.errors import ToolPlanError
from agent_worker.schemas.questions import AnswerType, Question, answer_problem, answer_text
from agent_worker.schemas.validation import InvalidPayload, parse_decision
from agent_worker.security.signing import signed_message

VERSION = "sha256:" + "a" * 64
FORM = {
    "type": "object",
    "properties": {"items": {"type": "array", "items": {"type": "integer"}}, "note": {"type": "string"}},
    "required": ["items"],
}


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"question": "?", "answer_type": "choice", "options": ["a"]}, "a choice needs 2 to 50 options"),
        ({"question": "?", "answer_type": "choice", "options": ["a", "a"]}, "must differ"),
        ({"question": "?", "answer_type": "form"}, "a form needs form_schema"),
        ({"question": "?", "answer_type": "form", "form_schema": {"type": 7}}, "not a valid JSON Schema"),
        ({"question": "?", "answer_type": "form", "form_schema": "{nope"}, "form_schema is not JSON"),
        ({"question": "?", "options": ["a", "b"]}, "options are only for answer_type 'choice'"),
        ({"question": ""}, "question"),
        ({"question": "?", "to": "bob"}, "takes no argument to"),
    ],
)
def test_arguments_that_make_no_question_go_back_to_the_model_naming_the_problem(
    arguments: dict[str, Any], problem: str
) -> None:
    """Each malformed `ask_human` call is a ToolPlanError (the model reads it) that says what is wrong."""
    with pytest.raises(ToolPlanError, match=problem):
        plan_question(arguments)


def test_a_form_schema_sent_as_json_text_is_read_as_the_schema() -> None:
    """A model that sends the form's schema as JSON text asks the same question as one sending it as
    an object."""
    import json

    as_text = plan_question({"question": "?", "answer_type": "form", "form_schema": json.dumps(FORM)})
    assert as_text == plan_question({"question": "?", "answer_type": "form", "form_schema": FORM})


def test_an_answer_is_checked_against_its_type_and_a_form_names_each_failing_field() -> None:
    """Text needs a non-empty string, a choice one of its options exactly, a form a value its schema
    accepts: the problem names the JSON path of every failing field; a fitting answer has none."""
    text = Question(question="who?")
    assert answer_problem(text, "  ") and answer_problem(text, 3) and answer_problem(text, "Ann") is None
    choice = Question(question="which?", answer_type=AnswerType.CHOICE, options=["x", "y"])
    assert "not one of the options: 'x', 'y'" in (answer_problem(choice, "X") or "")
    form = Question(question="what?", answer_type=AnswerType.FORM, form=FORM)
    problem = answer_problem(form, {"items": [1, "two", 3.5], "note": 4}) or ""
    assert "$.items[1]: 'two' is not of type 'integer'" in problem
    assert "$.items[2]: 3.5 is not of type 'integer'" in problem and "$.note: 4 is not of type" in problem
    assert answer_problem(form, {"items": [1, 2]}) is None
    assert answer_text(form, {"items": [1], "note": "ä"}) == '{"items": [1], "note": "ä"}'


def test_a_form_that_refers_outside_itself_is_refused_without_fetching_anything() -> None:
    """A `$ref` to a remote schema is not retrieved: the answer is refused, saying the reference is not
    within the form."""
    form = Question(
        question="?", answer_type=AnswerType.FORM, form={"$ref": "https://example.invalid/s.json"}
    )
    assert "not within it" in (answer_problem(form, {}) or "")


def test_a_decision_carries_an_answer_only_as_an_answer_and_a_respond_needs_its_message() -> None:
    """`answer` without an answer, an answer on an approve, and a respond without a reason are each
    refused naming the rule; an answer and a respond that hold it parse."""
    base = {"request_id": "req-1", "version": VERSION, "principal": "ann"}
    for raw, rule in (
        ({**base, "decision": "answer"}, "answer is required"),
        ({**base, "decision": "approve", "answer": "x"}, "answer is required"),
        ({**base, "decision": "respond"}, "reason is required when decision is 'respond'"),
    ):
        with pytest.raises(InvalidPayload, match=rule):
            parse_decision(raw)
    assert parse_decision({**base, "decision": "answer", "answer": {"a": 1}}).answer == {"a": 1}
    assert parse_decision({**base, "decision": "respond", "reason": "use 41"}).reason == "use 41"


def test_a_signature_covers_the_answer_and_other_decisions_sign_what_they_signed() -> None:
    """Two answers differ in their signed message; an approve's message has no answer field at all, so
    signatures made before answers existed still verify."""
    base = {"request_id": "req-1", "version": VERSION, "principal": "ann", "decision": "answer"}
    one = signed_message("t", parse_decision({**base, "answer": "yes"}), "chain")
    other = signed_message("t", parse_decision({**base, "answer": "no"}), "chain")
    assert one != other
    approve = signed_message("t", parse_decision({**base, "decision": "approve"}), "chain")
    assert b'"answer"' not in approve


def test_a_question_always_goes_to_a_person_whatever_the_policy_allows() -> None:
    """A rule on ask_human names who answers; with no rule the default approvers do; a rule that would
    allow the question sends it to the default approvers, and with none it is denied saying why."""
    from agent_worker.schemas.actions import ProposedAction, action_version
    from agent_worker.schemas.tasks import PolicySpec, PolicyVerdict
    from agent_worker.workflows.policy import evaluate
    from agent_worker.workflows.questions import route

    question = plan_question({"question": "who?"})
    arguments = {"question": "who?"}
    action = ProposedAction(
        call_id="c",
        tool="ask_human",
        effect="ask",
        arguments=arguments,
        operation=question,
        version=action_version("ask_human", arguments, question),
    )

    def decided(policy: dict[str, Any]) -> tuple[PolicyVerdict, tuple[str, ...]]:
        spec = PolicySpec.model_validate(policy)
        decision = route(evaluate(spec, action), action, spec)
        return decision.verdict, decision.approvers

    ask = {"tool": "ask_human", "decision": "require_approval", "approvers": ["ann"]}
    assert decided({"rules": [ask]}) == (PolicyVerdict.REQUIRE_APPROVAL, ("ann",))
    assert decided({"default_approvers": ["bob"]}) == (PolicyVerdict.REQUIRE_APPROVAL, ("bob",))
    allow = {"effect": "ask", "decision": "allow"}
    assert decided({"rules": [allow], "default_approvers": ["bob"]}) == (
        PolicyVerdict.REQUIRE_APPROVAL,
        ("bob",),
    )
    assert decided({"rules": [allow]}) == (PolicyVerdict.DENY, ())
    assert decided({}) == (PolicyVerdict.DENY, ())
