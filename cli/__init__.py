"""The ``agent-worker`` command line: ``agent_worker.cli.main:main`` (also ``python -m agent_worker.cli``)."""

__all__: list[str] = []
