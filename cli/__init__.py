"""The ``agent-worker`` command line (``cli.main:main``)."""

from cli.main import main

__all__ = ["main"]
