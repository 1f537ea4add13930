"""Benchmarks: each measures agent-worker against a baseline run in the same process, on the same dev
server, and reports ratios. ``python -m bench`` (``make bench``) runs all ten and writes
``bench/RESULTS.md``, headed by issue 21's targets table (``targets``); each module also runs alone
(``python -m bench.<module> [--quick]``) and keeps its latest full-size result in ``bench/results/``.

1. ``step_overhead``: one agent step vs a bare step doing the same work, as one activity per model
   call and one per command (the issue's baseline) and as one activity doing both.
2. ``vs_plugin``: the same scripted agent through the official ``temporalio-openai-agents`` plugin
   (``plugin_side``, in its own venv: ``plugin_venv``): wall time and history bytes per turn.
3. ``parked``: N tasks waiting for approval; memory, database size; then approve all.
4. ``crash``: SIGKILL of a busy worker to the next progress; repeated model calls.
5. ``long_task``: 1,000 turns with continue-as-new vs 1,000 bare activities.
6. ``sandbox``: ``sandbox.exec`` vs raw ``docker exec`` (``sandbox_exec``).
7. ``fleet``: tasks/s with 1, 2, 4 worker processes, model latency 200 ms.
8. ``embedded``: the dev server with WAL vs SQLite's default file mode.
9. ``round_trips``: workflow tasks, activities and local activities in the example task's history,
   whole and after its approval signal.
10. ``approval_cpu``: worker CPU per approval with every task cached, against bare, and with more
    active tasks than the cache holds.

Shared: ``script`` (the scripted conversation both sides follow, dependency-free), ``agents`` (the
agents registered on agent-worker), ``bare`` (the baseline workflows and activities), ``common``
(servers, workers, figures), ``report`` (RESULTS.md). This package imports nothing at import time, so
``plugin_side`` can import ``bench.script`` under another openai-agents.
"""

__all__: list[str] = []
