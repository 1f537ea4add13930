"""``python -m agent_worker.cli``: the ``agent-worker`` command."""

import sys

from agent_worker.cli.main import main

sys.exit(main())
