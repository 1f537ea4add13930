"""The ``agent-worker`` command line: ``cli.main:main`` (also ``python -m cli``)."""

__all__: list[str] = []
