"""Every ``workflow.patched`` id the workflows use, in one place.

A patch id is a public contract: the histories of tasks in flight carry it as a marker, and the
workflow takes the patched branch on replay only where that marker is. So an id never changes and is
never reused, and a removed patch needs a versioned migration and a replay test. Each id names the
change it guards and when it came (package version, date, commit). ``tests/test_replay.py`` replays a
committed history from each side of every id declared here (it reads the ``NAME_PATCH = "id"`` lines).

A release folds the patches before it (``FOLDED``): a run begun on 0.2 (``TaskInput.release``) takes
every patch of ``FOLDED_AT_0_2`` as base behaviour and records no marker for it; a run begun on 0.1
(an input without a release: every history recorded before 0.2.0) asks each patch as before, so its
history replays unchanged. 0.3 folds ``AFTER_0_2`` the same way, and brings behaviour of its own
without a patch (``on_line``). The run's release is the workflow's own ``release`` attribute, read through
``workflow.instance()``: never module state, which every run on a worker shares.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_worker.schemas.tasks import FIRST_RELEASE

# Event delivery to the sink (``events.publish`` between steps and at the end). 0.1.0, 2026-11-29, 91bdf22.
DELIVER_EVENTS_PATCH = "deliver-events"
# An approved action's permission is checked again (``authz.check``) right before it runs.
# 0.1.0, 2026-11-29, 7a0491b.
REAUTHORIZE_PATCH = "reauthorize-approved-actions"
# Older evidence moves to the artifact store before continue-as-new (``artifacts.archive``).
# 0.1.0, 2026-11-29, 1f8f578.
ARCHIVE_EVIDENCE_PATCH = "archive-evidence"
# A tenant's cap of running tasks (``tenants.admit`` at start, ``tenants.release`` at the end).
# 0.1.0, 2026-11-29, 7c81def.
TENANT_ADMISSION_PATCH = "tenant-admission"
# A sandbox that vanished mid-command is rebuilt from the task's inputs, once, and the loss recorded.
# 0.1.0, 2026-11-29, 7c81def.
REBUILD_SANDBOX_PATCH = "rebuild-lost-sandbox"
# Agent turns and sandbox commands on their role queues (``.agent``, ``.sandbox``) instead of the task
# queue. 0.1.0, 2026-11-29, 7971725.
ROLE_QUEUES_PATCH = "role-queues"
# Size bounds on every payload the task sends (``workflows.bounds``), capped follow-ups and ignored
# events, command previews cut. 0.1.0, 2026-12-01, e282f04.
BOUNDED_PATCH = "bounded-payloads"
# What derives from the task id (sandbox, journal, event ids, signatures, operation keys) is keyed by
# the run chain too, so a reused task id starts clean. 0.1.0, 2026-12-01, 584cf67.
RUN_CHAIN_PATCH = "run-chain-identity"
# Edits are planned (``agent.plan``) before the update ``decide`` accepts them, and an edit that still
# cannot be planned when its action runs re-opens the request, explained. 0.1.0, 2026-12-01, 584cf67.
CHECK_EDITS_PATCH = "check-edits"
# A write in flight when the task is cancelled is let settle and recorded (looked up when its answer is
# lost). 0.1.0, 2026-12-01, 5c2f0f5.
SETTLE_CANCELLED_WRITE_PATCH = "settle-cancelled-write"
# A request re-opened after its approver's permission was revoked is not put to that approver again
# (the task hands off when no other is left). 0.1.0, 2026-12-01, b7ab792.
REOPEN_WITHOUT_REVOKED_PATCH = "reopen-without-revoked-approver"
# A signalled decision past its ``expires_at`` is ignored, with the reason. 0.1.0, 2026-12-01, e4a232b.
DECISION_EXPIRY_PATCH = "decision-expiry"
# The allowed actions of a model response run concurrently (``PolicySpec.parallel_actions`` at once),
# before the task waits for the batch's approvals unless ``PolicySpec.allowed_first`` is off; decided
# actions run concurrently too. 0.1.0, 2026-12-01, 7561396.
PARALLEL_BATCH_PATCH = "parallel-batch"
# Tasks naming a thread (``TaskSpec.thread``): search attribute ``AgentThread``, ``threads.resume`` at
# start (the thread's latest finished conversation, by digest), ``TaskResult.conversation_ref``.
# 0.1.0, 2026-12-01, 9f5322e.
THREADS_PATCH = "threads"
# Follow-up input interrupts a running agent turn when ``PolicySpec.on_input`` is ``interrupt``: the
# turn is cancelled and starts again with the input. 0.1.0, 2026-12-01, 9f5322e.
INTERRUPT_PATCH = "interrupt-on-input"
# An agent turn that failed for good because an MCP server stayed unreachable (``mcp_unavailable``:
# its tools could not be listed, a read tool's server was down) hands the task off, naming the
# server, instead of failing it. 0.1.0, 2026-12-02, 00c722e.
MCP_UNAVAILABLE_PATCH = "mcp-unavailable-hands-off"
# A sandbox is created on the home queue of the host ``sandbox.place`` names, and the commands and the
# destroy of a host-local sandbox (process, docker) go to that queue (``SandboxRef.home_queue``), with
# a schedule-to-start timeout: a host that does not answer in time loses the sandbox (rebuilt,
# ``sandbox.lost``) or leaves it to its reaper (``sandbox.left``). 0.1.0, 2026-12-02, 8e5db05.
SANDBOX_HOME_PATCH = "sandbox-home-queue"
# The design's minimum of round trips (issue 21): input ingest and the sandbox's destroy as local
# activities in a workflow task that already runs (the destroy goes to the sandbox's home when this
# worker does not hold it); no ingest without inputs; the first command creates the sandbox
# (``ExecInput.create``); a write checks its approval in its own activity (``WriteInput.authz``) and its
# committed receipt confirms it (a lookup only after an unknown outcome); search attributes upserted
# only when they change; every patch below asked at the start (``PATCHES_AT_START``). Event delivery
# stays an activity: a local one would publish events of a workflow task that may never commit.
# 0.1.0, 2026-12-02, 42b57e7.
MINIMUM_ROUND_TRIPS_PATCH = "minimum-round-trips"
# A policy rule's ``sla``: reminders and escalation to a next approver group on durable timers, each
# notified once (``notify.send``), its own deadline, and ``on_expiry: continue`` (the model is told
# "expired, unanswered"). Asked at the start (PATCHES_AT_START) and while a request with an sla waits.
# 0.1.0, 2026-12-03, 67b23d7.
APPROVAL_SLA_PATCH = "approval-sla"
# Budgets across sub-task trees (``workflows.budget_tree``): a sub-task's cost, tokens, model calls and
# wall time are a reservation from what its parent has left, its spend rolls up into the parent's
# (``Usage.sub_task_*``, a failed child's from its failure's details); a turn starts only if what is
# left covers the costliest turn so far; a soft limit notifies once; at a hard limit with
# ``Budgets.extension`` the task asks for more (``budget.extend``) instead of handing off.
# 0.1.0, 2026-12-03, 0f101a2.
BUDGET_TREE_PATCH = "budget-tree"

# One marker for every patch above (issue 21). Each ``workflow.patched`` the SDK records is a marker
# event and an upsert of the ``TemporalChangeVersion`` search attribute carrying every patch id so far:
# the example task's run, asking 18 of them at its start, paid 36 of its 101 events, 19 KB of its
# 88 KB history as JSON, and 18 visibility updates (``bench/findings.md``, "Patch markers"). A run
# that begins with this one takes every patch of ``ONE_MARKER_COVERS`` without asking it; a run
# recorded before it (no such marker) asks each as before. Asked first (``patched``), in the run's
# first activation. 0.1.0, 2026-12-03, 36b9042.
ONE_MARKER_PATCH = "one-marker"

# A command in a host-local sandbox (after the first, which makes it) runs as the local activity
# ``sandbox.exec_here`` on the worker running the task when the task runs sandbox work there and the
# command's timeout is at most ``options.LOCAL_COMMAND_LIMIT``: that worker usually holds the sandbox,
# and the next turn is then scheduled in the same workflow task, where it took an activity on the
# sandbox's home queue (41.6 ms of queue wait per step in ``make bench``) and a workflow task for its
# result. A worker that does not hold it refuses (``sandbox_elsewhere``); the command goes home, and so
# do that home's later commands (``TaskState.refused_here``). 0.1.0, 2026-12-03, 948c9af.
EXEC_HERE_PATCH = "sandbox-exec-here"
# Events delivered packed (``PublishEventsInput.packed``): without the schema, task id, run chain and
# event id every event of a delivery shares, about 190 bytes each, a third of ``events.publish``'s
# input and so of the history it takes. A worker from before it reads no packed event (it answers
# ``delivered`` 0), and the part is sent again whole. 0.1.0, 2026-12-03, ed739af.
PACKED_EVENTS_PATCH = "packed-events"
# Events delivered by the local activity ``events.publish_here`` in the workflow task that recorded
# them (issue 21): no ``events.publish`` activity and no workflow task for its result, two of each in
# the example task (before the wait for the approver, at the end). A workflow task can fail after its
# local delivery ran and its retry number its events otherwise, so each delivery carries its
# ``basis`` (run index and history length) and the built-in sinks keep the copy of the highest
# (``activities.events.plan_replace``): they end with what the committed history recorded. A sink
# that cannot replace, or does not answer, gets them as ``events.publish``. 0.1.0, 2026-12-04, 8871c6b.
LOCAL_DELIVERY_PATCH = "local-delivery"
# History per turn at the floor: a finished task's result keeps the newest ``inline_evidence``
# records (default 20, was 100 and only at continue-as-new) with the older ones archived, and
# archiving names each record by the digest ``sandbox.exec`` stored it under
# (``artifacts.archive_stored``) instead of carrying it again; a turn that continues the run is sent
# neither the prompt nor the preview of a result it reads by reference; the turn event fills in the
# model calls a turn left out (``TurnUsage.records``); events go every 50, not 25. And a round trip
# less: a task of a tenant without a cap holds no place, so its end asks no ``tenants.release``.
# 0.1.0, 2026-12-04, 9be206a.
LEAN_EVIDENCE_PATCH = "lean-evidence"

# Forks (issue 41, docs/forks.md): a task whose spec names a parent (``TaskSpec.fork``) takes the
# parent's state at a step (``fork.prepare``), runs the parent's earlier commands again in its own
# sandbox, and answers a write the parent committed from the parent's receipt (``workflows.fork``).
# Asked in the first activation of a fork's run only (no other task carries its marker), right after
# ``PATCHES_AT_START`` and before any local activity. 0.2.0, 2026-12-05, da612b4.
FORK_PATCH = "fork"

# A task waits for a person in a short run by default (issue 43): a spec that leaves
# ``TaskSpec.continue_as_new_before_wait`` unset continues as new before a wait once its run has
# ``DEFAULT_EVENTS_BEFORE_WAIT`` events (0 turns it off). A parked task then replays a few events
# when its decision finds it out of the cache (bench/results/approval_cpu-3000.md), not all it did
# before. Asked at the start (PATCHES_AT_START). 0.2.0, 2026-12-06, 770e0e6.
SHORT_WAIT_PATCH = "short-wait-by-default"

# The patches of ``PATCHES_AT_START`` declared before ``ONE_MARKER_PATCH``, in the order they are asked.
# Never grows: ``ONE_MARKER_COVERS`` is made of it.
_BEFORE_ONE_MARKER = (
    DELIVER_EVENTS_PATCH,
    REAUTHORIZE_PATCH,
    ARCHIVE_EVIDENCE_PATCH,
    TENANT_ADMISSION_PATCH,
    REBUILD_SANDBOX_PATCH,
    ROLE_QUEUES_PATCH,
    BOUNDED_PATCH,
    RUN_CHAIN_PATCH,
    CHECK_EDITS_PATCH,
    SETTLE_CANCELLED_WRITE_PATCH,
    REOPEN_WITHOUT_REVOKED_PATCH,
    DECISION_EXPIRY_PATCH,
    PARALLEL_BATCH_PATCH,
    THREADS_PATCH,
    INTERRUPT_PATCH,
    MCP_UNAVAILABLE_PATCH,
    SANDBOX_HOME_PATCH,
    APPROVAL_SLA_PATCH,
    BUDGET_TREE_PATCH,
)
# Asked once at the start of every run that has ``MINIMUM_ROUND_TRIPS_PATCH``, before its first local
# activity. Why: a query that arrives while a local activity runs makes the worker end the workflow
# task early and go on in the next one, but a replay goes on in the same one, and a patch's marker is
# only found in the workflow task being replayed. A patch first asked right after a local activity
# could then answer differently on replay (a nondeterminism error). Asked at the start, every marker
# is in the run's first workflow task, before any local activity, and later asks are remembered. A
# new patch joins the end of this list (and, not being in ``ONE_MARKER_COVERS``, has a marker of its own).
PATCHES_AT_START = (
    *_BEFORE_ONE_MARKER,
    EXEC_HERE_PATCH,
    PACKED_EVENTS_PATCH,
    LOCAL_DELIVERY_PATCH,
    LEAN_EVIDENCE_PATCH,
    SHORT_WAIT_PATCH,
)
# The patches ``ONE_MARKER_PATCH`` stands for: every one declared before it.
ONE_MARKER_COVERS = frozenset({*_BEFORE_ONE_MARKER, MINIMUM_ROUND_TRIPS_PATCH})


# Every patch id declared by release 0.2.0: a run begun on 0.2 takes each one's branch, with no marker.
# Frozen: a patch declared after 0.2.0 goes to ``AFTER_0_2`` instead, and records its marker again
# (``tests/test_patches.py`` pins that every declared id is in exactly one of the two).
FOLDED_AT_0_2 = frozenset(
    {
        DELIVER_EVENTS_PATCH,
        REAUTHORIZE_PATCH,
        ARCHIVE_EVIDENCE_PATCH,
        TENANT_ADMISSION_PATCH,
        REBUILD_SANDBOX_PATCH,
        ROLE_QUEUES_PATCH,
        BOUNDED_PATCH,
        RUN_CHAIN_PATCH,
        CHECK_EDITS_PATCH,
        SETTLE_CANCELLED_WRITE_PATCH,
        REOPEN_WITHOUT_REVOKED_PATCH,
        DECISION_EXPIRY_PATCH,
        PARALLEL_BATCH_PATCH,
        THREADS_PATCH,
        INTERRUPT_PATCH,
        MCP_UNAVAILABLE_PATCH,
        SANDBOX_HOME_PATCH,
        MINIMUM_ROUND_TRIPS_PATCH,
        APPROVAL_SLA_PATCH,
        BUDGET_TREE_PATCH,
        ONE_MARKER_PATCH,
        EXEC_HERE_PATCH,
        PACKED_EVENTS_PATCH,
        LOCAL_DELIVERY_PATCH,
        LEAN_EVIDENCE_PATCH,
        FORK_PATCH,
    }
)
# The patches declared after 0.2.0 and before 0.3.0 (a 0.2 run asks each with a marker). Frozen.
AFTER_0_2: frozenset[str] = frozenset({SHORT_WAIT_PATCH})
# Every patch id declared by release 0.3.0: a run begun on 0.3 takes each one's branch, with no marker.
# Frozen: a patch declared after 0.3.0 went to ``AFTER_0_3`` (``tests/test_patches.py`` pins it).
FOLDED_AT_0_3 = FOLDED_AT_0_2 | AFTER_0_2
# The patches declared after 0.3.0 and before 0.4.0 (none). Frozen.
AFTER_0_3: frozenset[str] = frozenset()
# Every patch id declared by release 0.4.0. Frozen: a patch declared after 0.4.0 goes to ``AFTER_0_4``.
FOLDED_AT_0_4 = FOLDED_AT_0_3 | AFTER_0_3
# The patches declared after 0.4.0 (asked with a marker by every run, until a later release folds them).
AFTER_0_4: frozenset[str] = frozenset()
# What each release takes without asking: its own folded patches and those of every release before it.
FOLDED: Mapping[str, frozenset[str]] = MappingProxyType(
    {FIRST_RELEASE: frozenset(), "0.2": FOLDED_AT_0_2, "0.3": FOLDED_AT_0_3, "0.4": FOLDED_AT_0_4}
)
# The release lines in order (``on_line`` compares them).
LINES: tuple[str, ...] = tuple(FOLDED)
# Behaviour a release line brought without a patch: a run begun on that line or a later one has it
# from its first event, one begun on an earlier line never has it (it asks nothing, so its history
# replays as recorded). Used where a patch would cost more than the change saves: each marker is an
# event and a ``TemporalChangeVersion`` upsert in every run.
# Phase changes are published once they settle (``workflows.visibility``): 0.3.0, 2026-12-07.
SETTLED_VISIBILITY_LINE = "0.3"
# A change to ``running`` is published at once, so no settle timer is left running while the task works
# (one that fired during a task's last workflow task made the server refuse the completion and the
# worker replay the whole run: ``workflows.visibility``): 0.4.0, 2026-12-08.
RUNNING_AT_ONCE_LINE = "0.4"


def run_release() -> str:
    """The release line this run began on (workflow code): the ``release`` of the running workflow
    object, 0.1 for a workflow that has none.

    Raises:
        RuntimeError: called while the workflow object is being built (its ``__init__``), when the SDK
            has no instance to read yet: pass ``release=`` to ``patched`` there.
    """
    instance = workflow.instance()
    if instance is None:
        raise RuntimeError("patched() in a workflow's __init__ needs the run's release (release=...)")
    return getattr(instance, "release", None) or FIRST_RELEASE


def on_line(line: str, *, release: str | None = None) -> bool:
    """Whether this run began on release ``line`` or a later one (workflow code), so it has the
    behaviour that line brought; ``release`` as for ``patched``."""
    return LINES.index(release or run_release()) >= LINES.index(line)


def patched(patch: str, *, release: str | None = None) -> bool:
    """Whether this run takes ``patch``'s branch (workflow code; every workflow asks its patches here,
    never ``workflow.patched`` itself: ``scripts/check_workflows.py`` refuses that).

    A run begun on a release that folded ``patch`` takes it without a marker. A run that began with
    ``ONE_MARKER_PATCH`` takes each patch it covers without a marker of its own; any other run asks
    the patch, as before. The SDK remembers each answer for the rest of the run.

    Args:
        patch: The patch id.
        release: The run's release, given only where the workflow object is not built yet (its
            ``__init__``); elsewhere it is read from the running workflow (``run_release``).
    """
    if patch in FOLDED[release or run_release()]:
        return True
    if patch in ONE_MARKER_COVERS and workflow.patched(ONE_MARKER_PATCH):
        return True
    return workflow.patched(patch)


def ask_patches_at_start() -> None:
    """Ask every patch of ``PATCHES_AT_START`` (workflow code: from the workflow's first activation)."""
    for patch in PATCHES_AT_START:
        patched(patch)


__all__ = [
    "APPROVAL_SLA_PATCH",
    "AFTER_0_2",
    "AFTER_0_3",
    "AFTER_0_4",
    "ARCHIVE_EVIDENCE_PATCH",
    "BOUNDED_PATCH",
    "BUDGET_TREE_PATCH",
    "CHECK_EDITS_PATCH",
    "DECISION_EXPIRY_PATCH",
    "DELIVER_EVENTS_PATCH",
    "EXEC_HERE_PATCH",
    "FOLDED",
    "FOLDED_AT_0_2",
    "FOLDED_AT_0_3",
    "FOLDED_AT_0_4",
    "FORK_PATCH",
    "INTERRUPT_PATCH",
    "LEAN_EVIDENCE_PATCH",
    "LINES",
    "LOCAL_DELIVERY_PATCH",
    "MCP_UNAVAILABLE_PATCH",
    "MINIMUM_ROUND_TRIPS_PATCH",
    "ONE_MARKER_COVERS",
    "ONE_MARKER_PATCH",
    "PACKED_EVENTS_PATCH",
    "PARALLEL_BATCH_PATCH",
    "PATCHES_AT_START",
    "REAUTHORIZE_PATCH",
    "REBUILD_SANDBOX_PATCH",
    "REOPEN_WITHOUT_REVOKED_PATCH",
    "ROLE_QUEUES_PATCH",
    "RUNNING_AT_ONCE_LINE",
    "RUN_CHAIN_PATCH",
    "SANDBOX_HOME_PATCH",
    "SETTLE_CANCELLED_WRITE_PATCH",
    "SETTLED_VISIBILITY_LINE",
    "SHORT_WAIT_PATCH",
    "TENANT_ADMISSION_PATCH",
    "THREADS_PATCH",
    "ask_patches_at_start",
    "on_line",
    "patched",
    "run_release",
]
