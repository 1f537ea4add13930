"""Budgets: deterministic checks of a task's usage against its limits, in the workflow.

Retries have one owner, the turn activity's retry policy (``workflows/options.py``): the HTTP client
and the Agents SDK do not retry. So one model call runs at most ``TURN.retry.maximum_attempts``
times in the worst case, and thanks to the model-call journal a retried turn repeats only the call
that was in flight.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.tasks import Budgets, Usage


@dataclass(frozen=True)
class Exhausted:
    """A budget that is used up."""

    budget: str
    limit: float
    used: float

    @property
    def reason(self) -> str:
        return f"{self.budget} budget exhausted (used {self.used:g} of {self.limit:g})"


def exhausted(budgets: Budgets, usage: Usage, elapsed_seconds: float) -> Exhausted | None:
    """The first budget ``usage`` has reached, or None while every budget has room."""
    checks: list[tuple[str, float | None, float]] = [
        ("max_turns", budgets.max_turns, usage.turns),
        ("max_model_calls", budgets.max_model_calls, usage.model_calls),
        ("max_tokens", budgets.max_tokens, usage.input_tokens + usage.output_tokens),
        ("max_cost_usd", budgets.max_cost_usd, usage.cost_usd),
        ("max_wall_seconds", budgets.max_wall_seconds, elapsed_seconds),
    ]
    for name, limit, used in checks:
        if limit is not None and used >= limit:
            return Exhausted(name, limit, used)
    return None
