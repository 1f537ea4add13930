"""The worker: builds Temporal ``Worker``s from config and runs them (``agent-worker worker``, or
``python worker.py``).

The code lives in ``agent_worker.worker``: the command line imports it from there, so a user's own
``worker.py`` on the import path cannot break ``agent-worker worker``. This module keeps the layout's
entry point and the older ``from agent_worker.worker import ...`` working.
"""

from __future__ import annotations

from agent_worker.worker import *  # noqa: F403 (the same names, re-exported)
from agent_worker.worker import __all__ as __all__
from agent_worker.worker import main

if __name__ == "__main__":
    raise SystemExit(main())
