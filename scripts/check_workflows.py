#!/usr/bin/env python3
"""Check that the workflow code (``workflows/``) stays deterministic without the SDK's sandbox.

The worker passes ``workflows`` through the workflow sandbox (``agent_worker.worker.workflow_runner``):
its modules are imported once, outside the sandbox, instead of again for every workflow instance
(23% of a cache miss: ``bench/findings.md``). The sandbox then no longer stops what it would have
stopped there, so this check does, from the source alone (``ast``; nothing is imported):

- no import of a module that reads the world or the clock (``time``, ``random``, ``uuid``, ``os``,
  ``socket``, ``subprocess``, ``threading``, ``secrets``, HTTP clients), except inside a
  ``with workflow.unsafe.imports_passed_through():`` block, where the import is of code the
  workflow calls into as data (schemas, activity definitions);
- no call of a clock or random source by name (``datetime.now``, ``date.today``, ``time.time``,
  ``uuid.uuid4``, ``random.random``, ``os.environ``, ``open``, ...): ``workflow.now()``,
  ``workflow.uuid4()`` and ``workflow.random()`` are the replay-safe ones;
- no ``workflow.patched(...)`` outside ``workflows/patches.py``: every patch is asked through
  ``workflows.patches.patched``, so a run that began with its one marker adds no marker per patch;
- no mutable state at module level (a list, dict or set display or comprehension, or a call of
  ``list``, ``dict``, ``set``, ``defaultdict``, ``deque``), which every task on the worker would share:
  a module constant is a tuple, a frozenset, a ``MappingProxyType`` or a scalar.

Usage: ``python scripts/check_workflows.py [DIR]`` (default: the repository's ``workflows/``). Prints
each offence as ``path:line: what`` and exits 1, or prints a one-line summary and exits 0.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

FORBIDDEN_MODULES = frozenset(
    {
        "time",
        "random",
        "uuid",
        "os",
        "socket",
        "subprocess",
        "threading",
        "secrets",
        "requests",
        "httpx",
        "urllib",
        "sqlite3",
        "psycopg",
        "multiprocessing",
    }
)
# Attribute calls (``module.name`` or ``Class.name``) that read the clock, randomness or the world.
FORBIDDEN_CALLS = frozenset(
    {
        ("datetime", "now"),
        ("datetime", "utcnow"),
        ("datetime", "today"),
        ("date", "today"),
        ("time", "time"),
        ("time", "monotonic"),
        ("time", "perf_counter"),
        ("time", "sleep"),
        ("uuid", "uuid1"),
        ("uuid", "uuid4"),
        ("random", "random"),
        ("random", "randint"),
        ("random", "choice"),
        ("os", "getenv"),
        ("os", "urandom"),
    }
)
FORBIDDEN_NAMES = frozenset({"open", "input", "breakpoint"})
MUTABLE_FACTORIES = frozenset({"list", "dict", "set", "defaultdict", "deque", "OrderedDict", "Counter"})


def _passed_through(node: ast.With) -> bool:
    """Whether ``node`` is ``with workflow.unsafe.imports_passed_through():``."""
    return any(
        isinstance(item.context_expr, ast.Call)
        and isinstance(item.context_expr.func, ast.Attribute)
        and item.context_expr.func.attr == "imports_passed_through"
        for item in node.items
    )


def _offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[str] = []

    def say(node: ast.AST, what: str) -> None:
        found.append(f"{path}:{getattr(node, 'lineno', 0)}: {what}")

    allowed_imports: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.With) and _passed_through(node):
            allowed_imports |= {id(n) for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in allowed_imports:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if name.split(".")[0] in FORBIDDEN_MODULES:
                    say(node, f"imports {name} (the clock, randomness or I/O) outside imports_passed_through")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                if (func.value.id, func.attr) == ("workflow", "patched") and path.name != "patches.py":
                    say(node, "calls workflow.patched() (ask through workflows.patches.patched: one marker)")
                if (func.value.id, func.attr) in FORBIDDEN_CALLS:
                    say(node, f"calls {func.value.id}.{func.attr}() (use workflow.now(), uuid4(), random())")
            elif isinstance(func, ast.Name) and func.id in FORBIDDEN_NAMES:
                say(node, f"calls {func.id}() (I/O in workflow code)")
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and (node.value.id, node.attr) == ("os", "environ")
        ):
            say(node, "reads os.environ (workflow code sees only its input and history)")
    for statement in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(statement, ast.Assign):
            targets, value = statement.targets, statement.value
        elif isinstance(statement, ast.AnnAssign):
            targets, value = [statement.target], statement.value
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if value is None or names == ["__all__"]:
            continue
        mutable = isinstance(value, ast.List | ast.Dict | ast.Set | ast.ListComp | ast.DictComp | ast.SetComp)
        if isinstance(value, ast.Call):
            callee = value.func
            name = callee.id if isinstance(callee, ast.Name) else getattr(callee, "attr", "")
            mutable = name in MUTABLE_FACTORIES
        if mutable:
            shared = ", ".join(names)
            say(statement, f"module-level mutable state {shared} (every task on a worker shares it)")
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent / "workflows"
    files = sorted(root.rglob("*.py"))
    offences = [o for path in files for o in _offences(path)]
    for offence in offences:
        print(offence)
    if offences:
        return 1
    print(f"workflows: {len(files)} modules, deterministic without the sandbox's checks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
