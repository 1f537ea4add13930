"""Search attributes: how the Temporal UI and ``temporal workflow list --query`` find tasks.

Their names are public contracts. The dev-server launcher and the compose file register them; the
worker checks for them at start.
"""

from __future__ import annotations

import re

from temporalio.common import SearchAttributeKey

WORKFLOW_TYPE = "AgentTask"
"""The task workflow's type name, for what needs it as text (a visibility query, a stand-in workflow)."""
TASKS_QUERY = f"WorkflowType = '{WORKFLOW_TYPE}'"
"""The visibility query that lists every task (add ``AND ...`` to narrow it)."""
STATUS_QUERY = "status"
"""The task workflow's status query, for what cannot import the workflow (the doctor's activity)."""
PENDING_QUERY = "pending_approvals"
"""The query answering the requests still waiting (a list of ``ApprovalRequest``)."""
DECISION_SIGNAL = "submit_decision"
"""The decision signal's name, for a client that is not this one (the Temporal CLI's ``--name``)."""
DECISION_UPDATE = "decide"
"""The decision update's name (answers a ``DecisionOutcome``)."""
INPUT_SIGNAL = "add_input"
"""The follow-up input signal's name."""
DEFAULT_TASK_QUEUE = "agent-tasks"
"""The workers' task queue unless configured (``schemas.config`` takes it from here, so that the task
client can name it without importing the configuration's models)."""
_QUERYABLE = re.compile(r"^[A-Za-z0-9._@:+-]+$")  # safe inside a visibility query literal


def queryable(value: str) -> bool:
    """Whether ``value`` can stand as a literal in a visibility query (no quoting needed)."""
    return bool(_QUERYABLE.match(value))


PHASE = SearchAttributeKey.for_keyword("AgentTaskPhase")
TENANT = SearchAttributeKey.for_keyword("AgentTenant")
AWAITING_APPROVAL = SearchAttributeKey.for_bool("AgentAwaitingApproval")
APPROVERS = SearchAttributeKey.for_keyword_list("AgentApprovers")
AGENT = SearchAttributeKey.for_keyword("AgentName")
# Set only on tasks that name a thread (``TaskSpec.thread``): how a thread's next task finds its last.
THREAD = SearchAttributeKey.for_keyword("AgentThread")

ALL = (PHASE, TENANT, AWAITING_APPROVAL, APPROVERS, AGENT, THREAD)

# The CLI's names for the types (``temporal server start-dev --search-attribute NAME=TYPE``).
CLI_TYPES = {
    PHASE.name: "Keyword",
    TENANT.name: "Keyword",
    AWAITING_APPROVAL.name: "Bool",
    APPROVERS.name: "KeywordList",
    AGENT.name: "Keyword",
    THREAD.name: "Keyword",
}

AWAITING_QUERY = f"{AWAITING_APPROVAL.name} = true AND ExecutionStatus = 'Running'"
