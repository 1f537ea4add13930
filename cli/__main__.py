"""``python -m cli``: the ``agent-worker`` command."""

import sys

from cli.main import main

sys.exit(main())
