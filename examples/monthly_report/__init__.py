"""The monthly-report example (see ``agent.py`` and ``task.json``)."""
