"""Metrics on one Prometheus endpoint: the Temporal SDK's own (workflow tasks, activities, polls,
slots) and this package's, recorded through the SDK's metric meters so they share the endpoint.
Workflow-side metrics go through ``workflow.metric_meter()``, which records nothing during replay.

Ours (``AGENT_WORKER_METRICS_BIND=host:port`` turns the endpoint on; names are public contracts):

========================================  =========  ==========================================
name                                       kind       labels
========================================  =========  ==========================================
agent_worker_tasks_started                 counter    agent, tenant
agent_worker_tasks_finished                counter    agent, tenant, phase
agent_worker_tasks_refused                 counter    tenant (over its cap of running tasks)
agent_worker_phase_entered                 counter    phase
agent_worker_approvals_requested           counter    tool
agent_worker_approvals_decided             counter    tool, decision (pending = requested - decided)
agent_worker_approvals_ignored             counter
agent_worker_approval_wait_seconds         histogram  tool
agent_worker_approvals_reminded            counter    tool (a rule's sla reminded the approvers)
agent_worker_approvals_escalated           counter    tool (...escalated to its next group)
agent_worker_takeover_seconds              histogram  agent, tenant, work (turn | command): from a lost
                                                      worker's last heartbeat to the work resuming
agent_worker_model_calls                   counter    model, replayed
agent_worker_model_tokens                  counter    model, kind (input | output)
agent_worker_model_cost_microusd           counter    model
agent_worker_sandbox_exec_milliseconds     histogram  backend, outcome
agent_worker_writes                        counter    outcome (committed | rejected | unknown | conflict)
agent_worker_reconciliations               counter    found
agent_worker_budget_soft_limits            counter    budget (a task passed its soft limit)
agent_worker_budget_extensions             counter    budget (an approved extension raised a limit)
agent_worker_doctor_findings               counter    check (FleetDoctor found a stuck task)
========================================  =========  ==========================================

The workflow cache is the SDK's own (``temporal_`` prefix, label ``task_queue``), sized by
``workflow_cache_mb``: ``temporal_sticky_cache_miss`` (a workflow task found its workflow evicted and
replayed its history), ``temporal_sticky_cache_hit``, ``temporal_sticky_cache_size`` (a gauge: workflows
cached now) and ``temporal_sticky_cache_total_forced_eviction`` (evicted to make room).
"""

from __future__ import annotations

from collections.abc import Mapping

from temporalio import activity, workflow
from temporalio.common import MetricMeter
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

_runtime: Runtime | None = None


def prometheus_runtime(bind: str | None) -> Runtime | None:
    """A Temporal runtime serving ``/metrics`` on ``bind`` (one per process), or None."""
    global _runtime
    if bind is None:
        return None
    if _runtime is None:
        _runtime = Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=bind)))
    return _runtime


def _count(meter: MetricMeter, name: str, value: int, labels: Mapping[str, str | int | bool]) -> None:
    # A zero is added too: the series then exists from its first occasion (a cost of 0 for a free
    # model, say), and dashboards and alert rules find it.
    meter.create_counter(name).add(max(value, 0), dict(labels))


def workflow_counter(name: str, value: int = 1, **labels: str | int | bool) -> None:
    """Add to a counter from workflow code (nothing happens during replay)."""
    _count(workflow.metric_meter(), name, value, labels)


def workflow_histogram(name: str, value: float, **labels: str | int | bool) -> None:
    """Record a float in a histogram from workflow code (nothing happens during replay)."""
    workflow.metric_meter().create_histogram_float(name).record(value, dict(labels))


def activity_counter(name: str, value: int = 1, **labels: str | int | bool) -> None:
    """Add to a counter from activity code (no-op outside an activity)."""
    if activity.in_activity():
        _count(activity.metric_meter(), name, value, labels)


def activity_histogram(name: str, value: float, **labels: str | int | bool) -> None:
    """Record a float in a histogram from activity code (no-op outside an activity)."""
    if activity.in_activity():
        activity.metric_meter().create_histogram_float(name).record(value, dict(labels))
