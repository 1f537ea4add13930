"""Timeouts and retry policies of every activity the workflow runs, in one place."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from agent_worker.workflows.patches import ROLE_QUEUES_PATCH, patched
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityCancellationType, ActivityConfig, LocalActivityConfig

BUSINESS_QUEUE_SUFFIX = ".business"
# Worker roles each poll a queue of their own (``agent-worker worker --role``): workflows and light
# activities on the task queue itself, agent turns on ``.agent``, sandbox commands on ``.sandbox``,
# business writes on ``.business``. Runs begun before the split keep their activities on the task
# queue until their next new step (the change is guarded by ``ROLE_QUEUES_PATCH``).
AGENT_QUEUE_SUFFIX = ".agent"
SANDBOX_QUEUE_SUFFIX = ".sandbox"
# A sandbox of a host-local tier (process, docker) lives on the host that made it, so each sandbox
# worker also polls its home queue, ``<queue>.sandbox@<host id>``, and a task sends the commands and
# the destroy of its sandbox there (``SandboxRef.home_queue``; guarded by ``SANDBOX_HOME_PATCH``).
HOME_QUEUE_SEPARATOR = "@"
# How long an operation on the home queue waits for its host to take it (schedule-to-start) before
# the host counts as gone: a command then rebuilds the sandbox elsewhere (``sandbox.lost``), a destroy
# leaves it to that host's reaper. Long enough for a killed worker to be restarted on its data dir
# (a supervisor's restart and the worker's start take 5-30 s) and to outlast a burst that fills the
# host's activity slots; short enough that a host that is gone for good costs a task one minute, less
# than a command's own start-to-close timeout. A worker may record another in its sandboxes
# (``AGENT_WORKER_SANDBOX_HOME_WAIT_SECONDS``, ``SandboxRef.home_wait_seconds``).
SANDBOX_HOME_WAIT = timedelta(seconds=60)
# Every activity heartbeats every 2 s (activities.errors.activity_boundary): a worker that dies is
# noticed, and its work retried elsewhere, within this.
HEARTBEAT = timedelta(seconds=10)
# An activity's summary (what the Temporal UI shows for it) is cut to this many characters: it is
# stored in the history with the activity.
SUMMARY_CHARS = 200


def config(
    base: ActivityConfig,
    *,
    summary: str | None = None,
    start_to_close: timedelta | None = None,
    task_queue: str | None = None,
    final_errors: tuple[str, ...] = (),
    attempts: int | None = None,
    schedule_to_start: timedelta | None = None,
) -> ActivityConfig:
    """The keyword arguments of one ``workflow.execute_activity_method`` call: ``base`` (one of the
    constants below, never changed itself) with this call's summary, optionally a longer
    start-to-close timeout, another task queue, more error types that are not retried
    (``final_errors``), another number of ``attempts``, or a ``schedule_to_start`` timeout."""
    options = ActivityConfig(**base)
    if schedule_to_start is not None:
        options["schedule_to_start_timeout"] = schedule_to_start
    if final_errors:
        retry = base["retry_policy"]
        assert retry is not None
        options["retry_policy"] = replace(
            retry, non_retryable_error_types=[*(retry.non_retryable_error_types or ()), *final_errors]
        )
    if attempts is not None:
        retry = options["retry_policy"]
        assert retry is not None
        options["retry_policy"] = replace(retry, maximum_attempts=attempts)
    if start_to_close is not None:
        options["start_to_close_timeout"] = start_to_close
    if task_queue is not None:
        options["task_queue"] = task_queue
    if summary is not None:
        options["summary"] = summary[:SUMMARY_CHARS]
    return options


def local_config(
    base: LocalActivityConfig, *, summary: str | None = None, start_to_close: timedelta | None = None
) -> LocalActivityConfig:
    """The keyword arguments of one ``workflow.execute_local_activity_method`` call (no heartbeat, no
    queue: a local activity runs in the workflow's worker, its result recorded in one marker),
    optionally with a start-to-close timeout of its own."""
    options = LocalActivityConfig(**base)
    if summary is not None:
        options["summary"] = summary[:SUMMARY_CHARS]
    if start_to_close is not None:
        options["start_to_close_timeout"] = start_to_close
    return options


def _retry(attempts: int, *, max_interval: float = 30.0) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=max_interval),
        maximum_attempts=attempts,
    )


# Each constant is the SDK's ``ActivityConfig`` (``LocalActivityConfig`` for admission), with a
# default summary; calls pass them through ``config`` (``local_config``) with a summary of their own.
# A turn repeats its in-flight model call when retried; completed calls are not repeated (journal).
# Turns heartbeat every 2 s, so a dead worker is noticed within the heartbeat timeout.
TURN = ActivityConfig(
    start_to_close_timeout=timedelta(minutes=10),
    retry_policy=_retry(5),
    heartbeat_timeout=HEARTBEAT,
    summary="agent turn",
)
# A turn that follow-up input may interrupt (``PolicySpec.on_input``): the next one starts only once
# this one has stopped, so two attempts never run (and journal model calls) for one turn at once.
TURN_INTERRUPTIBLE = ActivityConfig(
    **TURN, cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
)
PLAN = ActivityConfig(
    start_to_close_timeout=timedelta(seconds=30),
    retry_policy=_retry(3),
    heartbeat_timeout=HEARTBEAT,
    summary="check a tool's arguments",
)
# A thread's lookup: a visibility query, a few describes and result reads.
THREADS = ActivityConfig(
    start_to_close_timeout=timedelta(minutes=1),
    retry_policy=_retry(10),
    heartbeat_timeout=HEARTBEAT,
    summary="find the thread's latest finished task",
)
INGEST = ActivityConfig(
    start_to_close_timeout=timedelta(minutes=2),
    retry_policy=_retry(5),
    heartbeat_timeout=HEARTBEAT,
    summary="store the task's inputs",
)
# Which host holds a new sandbox: a quick answer from whichever sandbox worker takes it.
SANDBOX_PLACE = ActivityConfig(
    start_to_close_timeout=timedelta(seconds=30),
    retry_policy=_retry(10),
    heartbeat_timeout=HEARTBEAT,
    summary="choose the sandbox's host",
)
# Hosts asked in turn for a new sandbox when the chosen one does not take the create in time.
SANDBOX_PLACE_TRIES = 3
SANDBOX_CREATE = ActivityConfig(
    start_to_close_timeout=timedelta(minutes=5),
    retry_policy=_retry(5),
    heartbeat_timeout=HEARTBEAT,
    summary="create the sandbox",
)
# Waiting for cancellation to complete means the command really is killed before the workflow moves on.
SANDBOX_EXEC = ActivityConfig(
    start_to_close_timeout=timedelta(minutes=2),
    retry_policy=_retry(3),
    heartbeat_timeout=HEARTBEAT,
    cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    summary="sandbox command",
)
SANDBOX_DESTROY = ActivityConfig(
    start_to_close_timeout=timedelta(minutes=2),
    retry_policy=_retry(10),
    heartbeat_timeout=HEARTBEAT,
    summary="destroy the sandbox",
)
# A write is retried only when it certainly did not apply (the system was down); a retried attempt
# looks its key up first. An unknown outcome is not retried: the workflow reconciles it by lookup.
BUSINESS_WRITE = ActivityConfig(
    start_to_close_timeout=timedelta(seconds=60),
    retry_policy=_retry(10),
    heartbeat_timeout=HEARTBEAT,
    summary="business write",
)
# An effect tool the agent brought (an own function, an MCP tool): each call gets the tool's own
# timeout and attempts (``FunctionCall``/``McpCall``); a retried attempt looks its key up first when
# the tool has a lookup. Attempts used up: the outcome is unknown and the task hands off.
TOOL_CALL = ActivityConfig(
    start_to_close_timeout=timedelta(seconds=60),
    retry_policy=_retry(5),
    heartbeat_timeout=HEARTBEAT,
    summary="effect tool call",
)
# Lookups retry within the task's patience (about five minutes), then the task hands off.
BUSINESS_LOOKUP = ActivityConfig(
    start_to_close_timeout=timedelta(seconds=30),
    retry_policy=_retry(12),
    heartbeat_timeout=HEARTBEAT,
    summary="look a write up",
)
# Confirming writes at completion is evidence gathering: when the system stays down the task
# completes marked evidence-incomplete rather than waiting minutes.
CONFIRM_LOOKUP = ActivityConfig(
    start_to_close_timeout=timedelta(seconds=30),
    retry_policy=_retry(4, max_interval=5.0),
    heartbeat_timeout=HEARTBEAT,
    summary="confirm a write by lookup",
)
# Admission is a quick local lookup: a local activity, so a refused start costs no server round trip.
ADMISSION = LocalActivityConfig(
    start_to_close_timeout=timedelta(seconds=10),
    retry_policy=_retry(10),
    summary="tenant admission",
)
AUTHZ = ActivityConfig(
    start_to_close_timeout=timedelta(seconds=30),
    retry_policy=_retry(10),
    heartbeat_timeout=HEARTBEAT,
    summary="check the approver's permission",
)
# A reminder or escalation keeps trying for about half an hour (a notifier down only delays it);
# one that never gets through is an event, and the task goes on waiting.
NOTIFY = ActivityConfig(
    start_to_close_timeout=timedelta(seconds=60),
    retry_policy=_retry(40, max_interval=60.0),
    summary="notify the approvers",
)
# Storing a remembered grant (``grants.save``): the state store down only delays the approved action.
GRANTS = ActivityConfig(
    start_to_close_timeout=timedelta(seconds=30),
    retry_policy=_retry(10),
    summary="remember the approval",
)
# Event delivery keeps retrying (a sink that is down only delays it); events wait in the state.
EVENTS = ActivityConfig(
    start_to_close_timeout=timedelta(seconds=30),
    retry_policy=_retry(20, max_interval=60.0),
    heartbeat_timeout=HEARTBEAT,
    summary="deliver events",
)
# Since patch ``local-delivery`` events go first as the local activity ``events.publish_here``, in the
# workflow task that recorded them; a sink that does not answer in a few tries gets them as
# ``events.publish`` (``EVENTS``, which keeps trying), so the workflow task is not held open by an outage.
EVENTS_LOCAL = LocalActivityConfig(
    start_to_close_timeout=timedelta(seconds=10),
    retry_policy=_retry(3, max_interval=4.0),
    summary="deliver events here",
)
# Since ``MINIMUM_ROUND_TRIPS_PATCH`` these run as local activities, in the workflow task that
# asks for them (no round trip through the server, only a marker in the history). Local activities
# have no heartbeat, so their timeouts are short; a longer outage retries in a later workflow task.
INGEST_LOCAL = LocalActivityConfig(
    start_to_close_timeout=timedelta(minutes=1),
    retry_policy=_retry(5),
    summary="store the task's inputs",
)
# The worker running the task usually holds its sandbox: it is asked first (``sandbox.destroy_here``),
# and refuses at once when it does not (``sandbox_elsewhere``); then the destroy goes to the sandbox's
# home as before.
SANDBOX_DESTROY_LOCAL = LocalActivityConfig(
    start_to_close_timeout=timedelta(seconds=30),
    retry_policy=RetryPolicy(maximum_attempts=2, non_retryable_error_types=["sandbox_elsewhere"]),
    summary="destroy the sandbox here",
)
# A command in the sandbox the worker running the task holds (``sandbox.exec_here``, patch
# ``sandbox-exec-here``): as ``SANDBOX_EXEC``, locally; refused at once when it does not hold it. Only
# for a command whose timeout is at most ``LOCAL_COMMAND_LIMIT`` (the default's): while a local
# activity runs, its workflow task stays open (the SDK extends it, three history events every few
# seconds, and signals wait for the next extension): cheap for a short command, not for an hour-long one.
SANDBOX_EXEC_LOCAL = LocalActivityConfig(
    start_to_close_timeout=timedelta(minutes=2),
    retry_policy=replace(_retry(3), non_retryable_error_types=["sandbox_elsewhere"]),
    cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    summary="sandbox command here",
)
LOCAL_COMMAND_LIMIT = timedelta(seconds=60)
# The reaper (workflow ``SandboxReaper``, on a schedule) removes orphaned sandboxes in one activity.
REAP = ActivityConfig(
    start_to_close_timeout=timedelta(minutes=10),
    retry_policy=RetryPolicy(maximum_attempts=3),
    heartbeat_timeout=HEARTBEAT,
    summary="reap orphaned sandboxes",
)
DOCTOR = ActivityConfig(
    start_to_close_timeout=timedelta(minutes=10),
    retry_policy=RetryPolicy(maximum_attempts=3),
    summary="check the running tasks",
)
# Rounds of write, lookup, write again under the same key before a human takes over.
MAX_WRITE_ROUNDS = 5


def agent_queue() -> str | None:
    """The task queue of agent turns (``None``: the workflow's own, for runs before the split)."""
    return _role_queue(AGENT_QUEUE_SUFFIX)


def sandbox_queue() -> str | None:
    """The task queue of sandbox commands (``None``: the workflow's own, for runs before the split)."""
    return _role_queue(SANDBOX_QUEUE_SUFFIX)


def home_queue(task_queue: str, host_id: str) -> str:
    """The home queue of host ``host_id``'s sandboxes, for tasks on ``task_queue``."""
    return f"{task_queue}{SANDBOX_QUEUE_SUFFIX}{HOME_QUEUE_SEPARATOR}{host_id}"


def _role_queue(suffix: str) -> str | None:
    if not patched(ROLE_QUEUES_PATCH):
        return None
    return f"{workflow.info().task_queue}{suffix}"


def business_queue() -> str:
    """The task queue of business writes, lookups and authorization checks: the workflow's own queue
    plus ``.business``, so that only the workers polling it hold business credentials."""
    return f"{workflow.info().task_queue}{BUSINESS_QUEUE_SUFFIX}"


EXEC_GRACE = timedelta(seconds=30)
# A command that creates the task's sandbox first (``ExecInput.create``) gets the create's time too.
SANDBOX_CREATE_GRACE = timedelta(minutes=5)
