"""``HandOff``: how a task stops on purpose. Its own module so every workflow helper can raise it
without importing another helper."""

from __future__ import annotations


class HandOff(Exception):
    """Raised inside the workflow to end the task ``handed_off``: a human must take over."""


__all__ = ["HandOff"]
