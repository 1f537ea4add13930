"""Fuzzing the entry points with arbitrary JSON, through the real client, against a real worker.

Hypothesis generates fully arbitrary JSON values and mutations of valid payloads
(``tests/helpers/fuzz_strategies.py``) and sends them as the workflow input, as ``submit_decision`` and
``add_input`` signals, and as ``decide`` updates. The properties: a start either runs or fails once
with a non-retryable error naming the field; a signal is recorded as ignored (or added) with its
reason and leaves the waiting task as it was; an update is refused with the same reason before it
reaches history; no input ever fails a workflow task; and after all of it the right approval still
completes the task. Each test prints how many inputs it tried.

Hypothesis runs in a thread and drives the async client on the test's event loop (where the worker
polls), one input at a time. Shrinking is off: inputs sent to a shared task are not independent, and
the failing input is printed whole anyway.

Knobs (test-only): ``AW_FUZZ_EXAMPLES=N`` tries N inputs per category; ``AW_FUZZ_SEED=S`` replays a
run (every run prints its seed); ``AW_FUZZ_KNOWN_BUGS=1`` also sends the inputs of ``KNOWN_BUGS``
(none open now), which are otherwise skipped (and counted) while a strict xfail test pins each.

The fuzz found three bugs, now fixed and kept as regression tests at the end of this file: JSON
nested too deeply for the worker's decoder, a client-supplied continue-as-new state, and an approval
timeout whose deadline overflowed.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
from agent_worker.schemas import visibility
from agent_worker.schemas.approvals import ApprovalRequest
from agent_worker.schemas.events import Event
from agent_worker.schemas.events import EventType as TaskEvent
from agent_worker.schemas.tasks import PolicySpec, TaskPhase, TaskResult, TaskSpec, TaskState, TaskStatus
from agent_worker.schemas.validation import InvalidPayload, parse_decision, parse_follow_up, parse_task_input
from agent_worker.workflows import AgentTaskWorkflow
from agent_worker.workflows.bounds import EVENT_TEXT_CHARS, IGNORED_REASON_CHARS, cut
from agent_worker.workflows.decisions import why_not
from hypothesis import HealthCheck, Phase, assume, example, given, seed, settings
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import History
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer

from tests.helpers.fuzz_strategies import payloads, task_inputs
from tests.helpers.support import TaskEnv, example_spec

T = TypeVar("T")


def _examples(default: int) -> int:
    value = os.environ.get("AW_FUZZ_EXAMPLES")
    return int(value) if value else default


STARTS = _examples(40)
DECISION_SIGNALS = _examples(100)
INPUT_SIGNALS = _examples(60)
UPDATES = _examples(80)
SEED = int(os.environ.get("AW_FUZZ_SEED") or random.randrange(2**32))
SEND_KNOWN_BUGS = os.environ.get("AW_FUZZ_KNOWN_BUGS") == "1"
# pytest-timeout's limit for a fuzz test, grown with the number of inputs asked for.
TIMEOUT = 300 + 2 * max(STARTS, DECISION_SIGNALS + INPUT_SIGNALS + UPDATES)
# A start settles (ends, or waits for a human) well within this; a valid monthly report takes ~1 s.
SETTLE_SECONDS = 60.0
# How long a signal may take to show up in the task's events.
OBSERVE_SECONDS = 20.0
# What an input error looks like when it names the field: "invalid task input: spec.x.y: message",
# or the whole input's type.
FIELD_NAMED = re.compile(r"^invalid task input: .+: .+|^task input must be a JSON object, got \w+$", re.S)


def fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,  # the checkout is shared; the seed and the printed input reproduce a failure
        phases=(Phase.explicit, Phase.generate),
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.filter_too_much,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
        report_multiple_bugs=False,
        print_blob=True,
    )


UNDECODABLE = "payload is not JSON this worker can decode (nested too deeply, or not JSON at all)"
CLIENT_STATE = (
    "invalid task input: state: only continue-as-new carries a state; "
    'start with the bare TaskSpec or {"spec": ...}'
)


class StuckWorkflow(AssertionError):
    """A workflow task failed (the workflow would retry it forever), or a start never settled."""


class LostInput(AssertionError):
    """A signal left no trace in the task: neither recorded nor a failed workflow task."""


# ---- inputs the workflow refuses beyond the parser, and known bugs -------------------------------


def _encoded(raw: Any) -> Payload | None:
    """``raw`` as the pydantic client sends it, or None when the client refuses to encode it."""
    try:
        [payload] = pydantic_data_converter.payload_converter.to_payloads([raw])
    except Exception:
        return None
    return payload


def _undecodable_by_worker(raw: Any) -> bool:
    payload = _encoded(raw)
    if payload is None:
        return False
    try:
        pydantic_data_converter.payload_converter.from_payloads([payload], [Any])
    except Exception:
        return True
    return False


def _carries_client_state(raw: Any) -> bool:
    try:
        state = parse_task_input(raw).state
    except InvalidPayload:
        return False
    # A state from newer code is handed off before it is used.
    return state is not None and state.schema_version <= TaskState.model_fields["schema_version"].default


def _approval_deadline_overflows(raw: Any) -> bool:
    try:
        timeout = parse_task_input(raw).spec.budgets.approval_timeout_seconds
        datetime.now(UTC) + timedelta(seconds=timeout)
    except InvalidPayload:
        return False
    except OverflowError:
        return True
    return False


@dataclass(frozen=True)
class KnownBug:
    """Inputs that break a property today, skipped by the fuzz (and counted) until fixed."""

    name: str
    what: str
    matches: Callable[[Any], bool]


# Inputs that break a property today, skipped by the fuzz (and counted) until fixed: none open.
KNOWN_BUGS: list[KnownBug] = []


def known_bug(raw: Any) -> KnownBug | None:
    return next((bug for bug in KNOWN_BUGS if bug.matches(raw)), None)


# ---- helpers -------------------------------------------------------------------------------------


class Bridge:
    """Runs coroutines on the test's event loop from Hypothesis's thread."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()

    def __call__(self, coro: Coroutine[Any, Any, T], timeout: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


def _failure_text(failure: Failure) -> str:
    parts = []
    while failure.message or failure.stack_trace:
        kind = failure.application_failure_info.type or "failure"
        parts.append(f"{kind}: {failure.message}\n{failure.stack_trace}")
        if not failure.HasField("cause"):
            break
        failure = failure.cause
    return "\ncaused by ".join(parts)


def workflow_task_failures(history: History) -> list[str]:
    return [
        _failure_text(e.workflow_task_failed_event_attributes.failure)
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]


async def raise_if_stuck(handle: WorkflowHandle[Any, Any], raw: Any) -> History:
    history = await handle.fetch_history()
    failures = workflow_task_failures(history)
    if failures:
        raise StuckWorkflow(
            f"workflow {handle.id}: a workflow task failed (Temporal retries it forever) after input "
            f"{_short(raw)}\n{failures[0]}"
        )
    return history


def _short(raw: Any, limit: int = 2000) -> str:
    text = repr(raw)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def _closing_failure(history: History) -> Failure | None:
    last = history.events[-1]
    if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
        return last.workflow_execution_failed_event_attributes.failure
    return None


async def check_start(env: TaskEnv, raw: Any) -> str:
    """Start a task with ``raw`` and wait until it settles; returns the outcome's name.

    Invalid input (by the project's own parser) must fail the workflow once, non-retryable, with the
    parser's message naming the field; valid input must run until it ends or waits for a human; no
    workflow task may fail. A task still running is terminated.
    """
    try:
        parse_task_input(raw)
        expected_error = None
    except InvalidPayload as err:
        expected_error = str(err)
    # What the workflow refuses beyond the parser: a payload its decoder cannot read (nested too
    # deeply), and a continue-as-new state sent by a client.
    if _undecodable_by_worker(raw):
        expected_error = UNDECODABLE
    elif expected_error is None and _carries_client_state(raw):
        expected_error = CLIENT_STATE
    task_id = f"fuzz-{uuid.uuid4().hex[:12]}"
    if _encoded(raw) is None:
        # Too deep for the client's encoder: refused before anything is sent.
        with pytest.raises(Exception, match="serializ"):
            await env.client.start_workflow(AgentTaskWorkflow.run, raw, id=task_id, task_queue=env.task_queue)
        assert (await env.client.count_workflows(f"WorkflowId = '{task_id}'")).count == 0
        return "refused by the client"
    await env.client.start_workflow(AgentTaskWorkflow.run, raw, id=task_id, task_queue=env.task_queue)
    handle = env.client.get_workflow_handle(task_id)  # the latest run, across continue-as-new
    try:
        deadline = time.monotonic() + SETTLE_SECONDS
        while True:
            await raise_if_stuck(handle, raw)
            described = await handle.describe()
            if described.status is not WorkflowExecutionStatus.RUNNING:
                break
            if expected_error is None and described.typed_search_attributes.get(visibility.AWAITING_APPROVAL):
                return "ran: awaiting approval"
            if time.monotonic() > deadline:
                raise StuckWorkflow(
                    f"workflow {task_id} did not settle in {SETTLE_SECONDS:g} s: {_short(raw)}"
                )
            await asyncio.sleep(0.05)
        history = await raise_if_stuck(handle, raw)
        failure = _closing_failure(history)
        if expected_error is not None:
            assert described.status is WorkflowExecutionStatus.FAILED, f"invalid input ran: {_short(raw)}"
            assert failure is not None
            info = failure.application_failure_info
            assert (info.type, info.non_retryable) == ("InvalidTaskInput", True)
            if expected_error == UNDECODABLE:
                assert failure.message.startswith(UNDECODABLE), failure.message
            else:
                assert failure.message == expected_error
                assert FIELD_NAMED.match(failure.message), failure.message
            return "refused: InvalidTaskInput"
        assert described.status in (WorkflowExecutionStatus.COMPLETED, WorkflowExecutionStatus.FAILED)
        if failure is None:
            return "ran: completed"
        info = failure.application_failure_info
        assert info.non_retryable and info.type != "InvalidTaskInput" and failure.message, failure
        return f"ran: failed ({info.type})"
    except StuckWorkflow:
        await handle.terminate("stuck on a fuzz input")
        # Let the worker's threads finish formatting the failed task's traceback before pytest parses
        # sources to report this one: CPython 3.11 can raise a spurious "AST constructor recursion
        # depth mismatch" SystemError when two threads build ASTs at once (python/cpython#106905).
        await asyncio.sleep(1)
        raise
    finally:
        if (await handle.describe()).status is WorkflowExecutionStatus.RUNNING:
            await handle.terminate("fuzz input checked")


def _totals(counts: Counter[str], *kinds: str) -> str:
    return ", ".join(f"{sum(n for k, n in counts.items() if k.startswith(kind))} {kind}" for kind in kinds)


def _summary(capsys: pytest.CaptureFixture[str], line: str) -> None:
    with capsys.disabled():
        print(f"\n{line}")


# ---- starts --------------------------------------------------------------------------------------


@pytest.mark.timeout(TIMEOUT)
async def test_arbitrary_start_input_runs_or_fails_once_naming_the_field(
    env: TaskEnv, capsys: pytest.CaptureFixture[str], record_property: Callable[[str, object], None]
) -> None:
    """Any JSON as the workflow input either runs (when valid) or fails that workflow once with a
    non-retryable InvalidTaskInput naming the field; no workflow task ever fails."""
    bridge = Bridge()
    spec = example_spec()
    outcomes: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    stuck = 0

    @fuzz_settings(STARTS)
    @seed(SEED)
    @given(raw=task_inputs(spec, avoid=frozenset({"docker"})))
    @example(raw="just a string")
    @example(raw=None)
    @example(raw=[spec])
    @example(raw={})
    @example(raw={"spec": None, "state": None})
    @example(raw=spec)
    def fuzz(raw: Any) -> None:
        nonlocal stuck
        bug = known_bug(raw)
        if bug is not None and not SEND_KNOWN_BUGS:
            skipped[bug.name] += 1
            assume(False)
        try:
            outcomes[bridge(check_start(env, raw))] += 1
        except StuckWorkflow:
            stuck += 1
            raise

    try:
        await asyncio.to_thread(fuzz)
    finally:
        tried = sum(outcomes.values()) + stuck
        record_property("fuzz_starts", tried)
        _summary(
            capsys,
            f"fuzz: {tried} starts tried ({', '.join(f'{n} {k}' for k, n in sorted(outcomes.items()))}); "
            f"known bugs skipped: {dict(skipped) or 'none'}; seed {SEED}; {stuck} stuck workflows",
        )
    assert outcomes["refused: InvalidTaskInput"] > 0 and any(k.startswith("ran:") for k in outcomes)


# ---- a task waiting for a human -----------------------------------------------------------------


@dataclass
class ParkedTask:
    """A monthly-report task waiting for approval, and what the fuzz has seen of it."""

    env: TaskEnv
    handle: WorkflowHandle[Any, Any]
    request: ApprovalRequest
    policy: PolicySpec
    last_seq: int

    def would_apply(self, raw: Any) -> bool:
        """Whether ``raw`` could be a real decision on the pending request (never sent: it would
        end the wait). Deliberately broader than the workflow's own checks."""
        try:
            decision = parse_decision(raw)
        except InvalidPayload:
            return False
        return (
            decision.request_id == self.request.request_id
            and decision.version == self.request.version
            and decision.principal in self.request.approvers
        )

    def expected_reason(self, raw: Any) -> str:
        """Why the workflow must ignore or refuse ``raw``."""
        if _undecodable_by_worker(raw):
            return UNDECODABLE
        try:
            decision = parse_decision(raw)
        except InvalidPayload as err:
            return str(err)
        reason = why_not([self.request], decision, self.handle.id, self.policy)
        assert reason is not None, f"a decision that applies was about to be sent: {raw!r}"
        return reason

    async def status(self) -> TaskStatus:
        return await self.handle.query(AgentTaskWorkflow.status, rpc_timeout=timedelta(seconds=10))

    def assert_still_waiting(self, status: TaskStatus) -> None:
        assert status.phase is TaskPhase.AWAITING_APPROVAL
        assert [(r.request_id, r.version, r.decided) for r in status.pending] == [
            (self.request.request_id, self.request.version, False)
        ]

    async def next_event(self, raw: Any, kinds: set[TaskEvent]) -> tuple[Event, TaskStatus]:
        """The one event of ``kinds`` that ``raw`` caused, once the task has recorded it."""
        deadline = time.monotonic() + OBSERVE_SECONDS
        while True:
            try:
                status = await self.status()
            except Exception:
                status = None
            if status is not None:
                new = [e for e in status.last_events if e.seq > self.last_seq]
                if new:
                    self.assert_still_waiting(status)
                    relevant = [e for e in new if e.type in kinds]
                    others = [e.type for e in new if e.type not in kinds]
                    assert others in ([], [TaskEvent.CONTINUED_AS_NEW]), others
                    assert len(relevant) == 1, f"{len(relevant)} events for one signal {_short(raw)}"
                    self.last_seq = max(e.seq for e in new)
                    return relevant[0], status
            if time.monotonic() > deadline:
                await raise_if_stuck(self.handle, raw)
                raise LostInput(
                    f"the task recorded nothing in {OBSERVE_SECONDS:g} s (and no workflow task failed) "
                    f"for the signal {_short(raw)}"
                )
            await asyncio.sleep(0.02)

    async def send_decision(self, raw: Any) -> str:
        if _encoded(raw) is None:
            with pytest.raises(Exception, match="serializ"):
                await self.handle.signal(AgentTaskWorkflow.submit_decision, raw)
            return "refused by the client"
        # What the task keeps of a reason is cut to a bound (workflows.bounds).
        expected = cut(self.expected_reason(raw), IGNORED_REASON_CHARS)
        await self.handle.signal(AgentTaskWorkflow.submit_decision, raw)
        event, status = await self.next_event(raw, {TaskEvent.APPROVAL_IGNORED})
        assert (event.data["reason"], event.data["via"]) == (expected, "signal")
        assert status.ignored[-1].reason == expected
        return "ignored"

    async def send_input(self, raw: Any) -> str:
        if _encoded(raw) is None:
            with pytest.raises(Exception, match="serializ"):
                await self.handle.signal(AgentTaskWorkflow.add_input, raw)
            return "refused by the client"
        follow_up, expected = None, ""
        try:
            follow_up = parse_follow_up(raw)
        except InvalidPayload as err:
            expected = str(err)
        if _undecodable_by_worker(raw):
            follow_up, expected = None, UNDECODABLE
        await self.handle.signal(AgentTaskWorkflow.add_input, raw)
        event, _ = await self.next_event(raw, {TaskEvent.INPUT_ADDED, TaskEvent.INPUT_IGNORED})
        if follow_up is None:
            # Event strings are cut to a bound (workflows.bounds).
            reason = cut(expected, EVENT_TEXT_CHARS)
            assert (event.type, event.data["reason"]) == (TaskEvent.INPUT_IGNORED, reason)
            return "ignored"
        assert event.type is TaskEvent.INPUT_ADDED
        assert (event.data["chars"], event.data["principal"]) == (len(follow_up.text), follow_up.principal)
        return "added"

    async def send_update(self, raw: Any) -> str:
        if _encoded(raw) is None:
            with pytest.raises(Exception, match="serializ"):
                await self.handle.execute_update(AgentTaskWorkflow.decide, raw)
            return "refused by the client"
        expected = self.expected_reason(raw)
        with pytest.raises(WorkflowUpdateFailedError) as caught:
            await self.handle.execute_update(AgentTaskWorkflow.decide, raw, rpc_timeout=timedelta(seconds=30))
        cause = caught.value.cause
        assert isinstance(cause, ApplicationError), cause
        assert cause.message == expected
        return "refused"


async def park(env: TaskEnv) -> ParkedTask:
    started = await env.start(example_spec())
    # Without a run id the handle follows continue-as-new.
    handle = env.client.get_workflow_handle(started.id, result_type=TaskResult)
    status = await env.awaiting_approval(handle)
    [request] = status.pending
    return ParkedTask(
        env=env,
        handle=handle,
        request=request,
        policy=TaskSpec.model_validate(example_spec()).policy,
        last_seq=max(e.seq for e in status.last_events),
    )


def decision_bases(request: ApprovalRequest) -> list[dict[str, Any]]:
    """Right and wrong decisions on ``request``, for the fuzz to mutate."""
    ok = {
        "request_id": request.request_id,
        "version": request.version,
        "decision": "approve",
        "principal": "finance-lead",
    }
    return [
        ok,
        {**ok, "reason": "checked the sheets"},
        {**ok, "decision": "edit", "edited_args": {"total": "9600.00"}},
        {**ok, "decision": "reject", "reason": "not audited yet"},
        {**ok, "signature": "c2lnbmF0dXJl"},
        {**ok, "version": "sha256:" + "0" * 64},
        {**ok, "request_id": "req-99"},
        {**ok, "principal": "intern"},
    ]


@pytest.mark.timeout(TIMEOUT)
async def test_a_waiting_task_survives_fuzzed_signals_and_updates_then_completes(
    env: TaskEnv, capsys: pytest.CaptureFixture[str], record_property: Callable[[str, object], None]
) -> None:
    """A task waiting for approval takes arbitrary `submit_decision` and `add_input` signals (each
    recorded as ignored with its reason, or added) and `decide` updates (each refused with the same
    reason, leaving nothing in history), keeps waiting on the same request, never fails a workflow
    task, and the right approval still completes it."""
    bridge = Bridge()
    task = await park(env)
    counts: Counter[str] = Counter()
    skipped: Counter[str] = Counter()

    def skip_known_bugs(raw: Any) -> None:
        bug = known_bug(raw)
        if bug is not None and not SEND_KNOWN_BUGS:
            skipped[bug.name] += 1
            assume(False)

    @fuzz_settings(DECISION_SIGNALS)
    @seed(SEED)
    @given(raw=payloads(*decision_bases(task.request)))
    @example(raw="approve")
    @example(raw=None)
    @example(raw={k: v for k, v in decision_bases(task.request)[0].items() if k != "version"})
    def fuzz_decisions(raw: Any) -> None:
        skip_known_bugs(raw)
        assume(not task.would_apply(raw))
        counts[f"decision signals {bridge(task.send_decision(raw))}"] += 1

    @fuzz_settings(INPUT_SIGNALS)
    @seed(SEED)
    @given(raw=payloads("break the total down by region", {"text": "add Q3", "principal": "finance-lead"}))
    @example(raw="")
    @example(raw="also list the top product")
    @example(raw={"text": "x" * 100_001})
    def fuzz_inputs(raw: Any) -> None:
        skip_known_bugs(raw)
        counts[f"add_input signals {bridge(task.send_input(raw))}"] += 1

    @fuzz_settings(UPDATES)
    @seed(SEED)
    @given(raw=payloads(*decision_bases(task.request)))
    @example(raw=[])
    def fuzz_updates(raw: Any) -> None:
        skip_known_bugs(raw)
        assume(not task.would_apply(raw))
        counts[f"updates {bridge(task.send_update(raw))}"] += 1

    failures: Counter[str] = Counter()
    try:
        for fuzz in (fuzz_decisions, fuzz_inputs, fuzz_updates):
            try:
                await asyncio.to_thread(fuzz)
            except (StuckWorkflow, LostInput) as err:
                failures["stuck workflows" if isinstance(err, StuckWorkflow) else "lost signals"] += 1
                raise
        history = await raise_if_stuck(task.handle, "(all of the above)")
        update_events = [
            e for e in history.events if e.HasField("workflow_execution_update_accepted_event_attributes")
        ]
        assert update_events == [], "a refused update reached history"
        status = await task.status()
        task.assert_still_waiting(status)
        assert status.last_events[-1].seq == task.last_seq, "an update changed the task"
    finally:
        record_property("fuzz_waiting_task", dict(counts))
        _summary(
            capsys,
            f"fuzz: {_totals(counts, 'decision signals', 'add_input signals', 'updates')} tried on one "
            f"waiting task ({', '.join(f'{n} {k}' for k, n in sorted(counts.items()))}); "
            f"known bugs skipped: {dict(skipped) or 'none'}; seed {SEED}; "
            f"{failures['stuck workflows']} stuck workflows, {failures['lost signals']} lost signals",
        )

    # Nothing got stuck: the right decision still completes the task, once.
    approve = decision_bases(task.request)[0]
    await task.handle.signal(AgentTaskWorkflow.submit_decision, approve)
    result: TaskResult = await asyncio.wait_for(task.handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert [(a.request_id, a.principal) for a in result.evidence.approvals] == [
        (task.request.request_id, "finance-lead")
    ]
    assert env.business().count() == 1
    history = await raise_if_stuck(task.handle, approve)
    await Replayer(workflows=[AgentTaskWorkflow], data_converter=pydantic_data_converter).replay_workflow(
        history
    )
    assert counts["decision signals ignored"] > 0 and counts["updates refused"] > 0
    assert counts["add_input signals added"] > 0 and counts["add_input signals ignored"] > 0


# ---- the bugs the fuzz found, fixed: regression tests ------------------------------------------------


def _deep(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


def _with_budget(**budgets: Any) -> dict[str, Any]:
    spec = example_spec()
    spec["budgets"].update(budgets)
    return spec


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param({"spec": example_spec(), "junk": _deep(220)}, id="deep-json"),
        pytest.param({"spec": example_spec(), "state": {"phase": "running"}}, id="client-state-phase"),
        pytest.param({"spec": example_spec(), "state": {"turn": -1}}, id="client-state-turn"),
        pytest.param({"spec": example_spec(), "state": {"event_seq": -5}}, id="client-state-event-seq"),
        pytest.param(
            {"spec": example_spec(), "state": {"run_state_ref": ""}}, id="client-state-run-state-ref"
        ),
        pytest.param(_with_budget(approval_timeout_seconds=1e12), id="approval-deadline-overflow"),
        pytest.param(_with_budget(approval_timeout_seconds=1e300), id="approval-timedelta-overflow"),
        # 3,084 bytes of agent name: the search attribute AgentName takes at most 2,048.
        pytest.param({"spec": {**example_spec(), "agent": "\U0001f642" * 771}}, id="agent-name-too-long"),
    ],
)
async def test_known_bug_inputs_fail_once_instead_of_retrying_forever(env: TaskEnv, raw: Any) -> None:
    """Each input the fuzz found failing workflow tasks forever now fails its workflow once, with a
    non-retryable InvalidTaskInput saying why."""
    assert await check_start(env, raw) == "refused: InvalidTaskInput"


async def test_a_too_deep_decision_signal_is_recorded_as_ignored(env: TaskEnv) -> None:
    """A decision nested deeper than the worker decodes is still recorded as ignored, with a reason."""
    task = await park(env)
    try:
        await task.handle.signal(AgentTaskWorkflow.submit_decision, {"request_id": _deep(220)})
        # Signals are handled in order: once this marker is recorded, the deep one was handled.
        await task.handle.signal(AgentTaskWorkflow.submit_decision, {"request_id": 7})
        status = await task.env.wait_status(
            task.handle,
            lambda s: any("request_id: Input should be a valid string" in i.reason for i in s.ignored),
        )
        assert len(status.ignored) == 2, [i.reason for i in status.ignored]
    finally:
        await task.env.cancel(task.handle)
