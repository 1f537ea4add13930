"""Budgets: deterministic checks of a task's usage against its limits, in the workflow.

Retries have one owner, the turn activity's retry policy (``workflows/options.py``): the HTTP client
and the Agents SDK do not retry. So one model call runs at most ``TURN.retry.maximum_attempts``
times in the worst case, and thanks to the model-call journal a retried turn repeats only the call
that was in flight.

Since ``BUDGET_TREE_PATCH`` a task's spend includes its sub-tasks' (``spent``), its limits include
what approved extensions added (``effective``), and a turn starts only when what is left covers the
task's costliest turn so far (``exhausted(..., ahead=True)``), so a tree of tasks stops at its budget
rather than one turn past it. Pure functions of their arguments: the workflow keeps the state.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow

with workflow.unsafe.imports_passed_through():  # payload models and helpers: one copy for all runs
    from agent_worker.schemas.tasks import Budgets, Reservation, Usage

# The budgets a sub-task draws from its parent (the others, turns and actions, are per task).
SHARED = ("max_cost_usd", "max_tokens", "max_model_calls")


@dataclass(frozen=True)
class Exhausted:
    """A budget that is used up (or that cannot cover the next turn)."""

    budget: str
    limit: float
    used: float
    ahead: float = 0.0

    @property
    def reason(self) -> str:
        if self.used < self.limit and self.ahead:
            return (
                f"{self.budget} budget exhausted (used {self.used:g} of {self.limit:g}; "
                f"the next turn may take {self.ahead:g})"
            )
        return f"{self.budget} budget exhausted (used {self.used:g} of {self.limit:g})"


def spent(usage: Usage, *, tree: bool) -> dict[str, float]:
    """What the task has used of each budget: with ``tree``, its finished sub-tasks' spend too."""
    own = {
        "max_turns": float(usage.turns),
        "max_model_calls": float(usage.model_calls),
        "max_tokens": float(usage.input_tokens + usage.output_tokens),
        "max_cost_usd": usage.cost_usd,
    }
    if tree:
        own["max_model_calls"] += usage.sub_task_model_calls
        own["max_tokens"] += usage.sub_task_input_tokens + usage.sub_task_output_tokens
        own["max_cost_usd"] += usage.sub_task_cost_usd
    return own


def effective(budgets: Budgets, added: dict[str, float]) -> Budgets:
    """``budgets`` with what approved extensions ``added`` (by field name)."""
    if not added:
        return budgets
    update: dict[str, float | int] = {}
    for name, amount in added.items():
        limit = getattr(budgets, name)
        if limit is None:
            continue
        update[name] = int(limit + amount) if isinstance(limit, int) else limit + amount
    return budgets.model_copy(update=update)


def turn_ahead(usage: Usage) -> dict[str, float]:
    """What the next turn may take of each budget: as much as the costliest turn so far."""
    return {
        "max_turns": 1.0,
        "max_model_calls": float(usage.largest_turn_calls),
        "max_tokens": float(usage.largest_turn_tokens),
        "max_cost_usd": usage.costliest_turn_usd,
    }


def exhausted(
    budgets: Budgets,
    usage: Usage,
    elapsed_seconds: float,
    *,
    tree: bool = False,
    ahead: bool = False,
) -> Exhausted | None:
    """The first budget ``usage`` has reached, or None while every budget has room. With ``ahead``, a
    budget that cannot cover another turn like the costliest so far counts as reached."""
    used = spent(usage, tree=tree)
    used["max_wall_seconds"] = elapsed_seconds
    next_turn = turn_ahead(usage) if ahead else {}
    for name in ("max_turns", "max_model_calls", "max_tokens", "max_cost_usd", "max_wall_seconds"):
        limit = getattr(budgets, name)
        if limit is None:
            continue
        step = next_turn.get(name, 0.0)
        # max_turns counts whole turns: reached at the limit, as before.
        if used[name] >= limit or (name != "max_turns" and step and used[name] + step > limit):
            return Exhausted(name, limit, used[name], step)
    return None


def past_soft_limit(budgets: Budgets, usage: Usage, noticed: list[str]) -> list[tuple[str, float, float]]:
    """The shared budgets past ``budgets.soft_limit`` of their limit and not yet ``noticed``:
    (budget, limit, used) each."""
    if budgets.soft_limit is None:
        return []
    used = spent(usage, tree=True)
    found = []
    for name in SHARED:
        limit = getattr(budgets, name)
        if limit is not None and name not in noticed and used[name] >= budgets.soft_limit * limit:
            found.append((name, float(limit), used[name]))
    return found


def left(budgets: Budgets, usage: Usage, reserved: list[Reservation]) -> dict[str, float | None]:
    """What is left of each shared budget once the running sub-tasks' ``reserved`` shares are set
    aside (None: no limit)."""
    used = spent(usage, tree=True)
    held = {
        "max_cost_usd": sum(r.cost_usd or 0.0 for r in reserved),
        "max_tokens": float(sum(r.tokens or 0 for r in reserved)),
        "max_model_calls": float(sum(r.model_calls or 0 for r in reserved)),
    }
    out: dict[str, float | None] = {}
    for name in SHARED:
        limit = getattr(budgets, name)
        out[name] = None if limit is None else limit - used[name] - held[name]
    return out


def share(remaining: dict[str, float | None], starting: int) -> Reservation | None:
    """One of ``starting`` sub-tasks' equal share of ``remaining``; None when a limited budget has
    nothing left to share (the sub-task cannot start)."""
    cost, tokens, calls = (remaining[name] for name in SHARED)
    reservation = Reservation(
        cost_usd=None if cost is None else cost / starting,
        tokens=None if tokens is None else int(tokens // starting),
        model_calls=None if calls is None else int(calls // starting),
    )
    if (
        (reservation.cost_usd is not None and reservation.cost_usd <= 0)
        or (reservation.tokens is not None and reservation.tokens < 1)
        or (reservation.model_calls is not None and reservation.model_calls < 1)
    ):
        return None
    return reservation


def child_budgets(parent: Budgets, reservation: Reservation, wall_left: float | None) -> Budgets:
    """A sub-task's budgets: the parent's, its shared limits the ``reservation``, its wall time what
    the parent has left; no extension and no soft limit of its own (the parent asks for both)."""
    return parent.model_copy(
        update={
            "max_cost_usd": reservation.cost_usd,
            "max_tokens": reservation.tokens,
            "max_model_calls": reservation.model_calls
            if reservation.model_calls is not None
            else parent.max_model_calls,
            "max_wall_seconds": wall_left,
            "extension": None,
            "soft_limit": None,
            "notify": [],
        }
    )
