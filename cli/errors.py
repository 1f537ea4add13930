"""The one error a command raises to stop: ``CliError``, whose ``code`` is the exit code.

Exit codes across the commands: 0 done, 1 the operation was refused or the task did not complete,
2 bad input (a file, an argument, a setting).
"""

from __future__ import annotations

__all__ = ["CliError"]


class CliError(Exception):
    """A command cannot proceed; ``code`` is the exit code. ``agent-worker`` prints the message
    (``agent-worker: <message>``) on stderr and exits with the code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code
