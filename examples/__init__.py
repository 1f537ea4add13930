"""Example agents and their tasks. Each example ships its TaskSpec as ``task.json``, which any
Temporal client can send unchanged as the ``AgentTask`` workflow input."""

from __future__ import annotations

from pathlib import Path

EXAMPLES: dict[str, Path] = {
    "monthly-report": Path(__file__).parent / "monthly_report" / "task.json",
}

__all__ = ["EXAMPLES"]
