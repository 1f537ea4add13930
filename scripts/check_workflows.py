#!/usr/bin/env python3
"""Check that the workflow code, and the code of ours it runs, stays deterministic.

The worker passes ``workflows`` (``agent_worker.workflows``; this check names our packages by their
folders) through the workflow sandbox for speed
(``agent_worker.plugin.WORKFLOW_CODE``), and our payload models and helpers are passed through where
workflow code imports them (``imports_passed_through``): the sandbox no longer re-imports them per
run, nor stops there all it would stop. This check does, from the source alone (``ast``; nothing
is imported). It reads:

- every module of ``workflows/`` (the workflow code), whole;
- the code of ours that workflow code runs: each function, class and method of ``schemas``,
  ``security``, ``telemetry`` and ``activities`` that a workflow module imports and uses (an
  activity class only referenced, ``SomeActivities.method``, is scheduled, not run, and is not
  read), and what those call in turn, across our packages.

In that code it refuses, naming each ``path:line``:

- a call of the clock, randomness or the environment, by the name it resolves to through the
  module's imports (aliases included: ``import datetime as dt`` then ``dt.datetime.now()``, ``from
  datetime import datetime as D`` then ``D.now()``): ``datetime.now``/``utcnow``/``today``,
  ``date.today``, anything of ``time``, ``random``, ``secrets``, ``uuid.uuid1``/``uuid4``,
  ``subprocess``, ``socket``, ``threading``, ``os`` (``os.path`` string helpers aside), HTTP clients;
  ``workflow.now()``, ``workflow.uuid4()`` and ``workflow.random()`` are the replay-safe ones;
- a read of ``os.environ``; a call of ``open``, ``input`` or ``breakpoint``; file I/O by method
  (``read_text``, ``write_bytes``, ``iterdir``, ``mkdir``, ... on any path);
- in ``workflows/`` only: an import of such a module outside ``imports_passed_through``, a
  ``workflow.patched(...)`` outside ``workflows/patches.py`` (every patch is asked through
  ``workflows.patches.patched``), and mutable state at module level (a list, dict or set display or
  comprehension, or a call of ``list``, ``dict``, ``set``, ``defaultdict``, ``deque``), which every
  task on a worker would share: a module constant is a tuple, a frozenset, a ``MappingProxyType`` or
  a scalar.

Usage: ``python scripts/check_workflows.py [ROOT]``: ROOT is the repository (default: the one this
script is in); a ROOT without ``workflows/`` is read as the workflow code itself. Prints each
offence as ``path:line: what`` and exits 1, or prints a one-line summary and exits 0.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

OUR_PACKAGES = frozenset({"workflows", "schemas", "security", "telemetry", "activities"})
FORBIDDEN_MODULES = frozenset(
    {"time", "random", "uuid", "os", "socket", "subprocess", "threading", "secrets", "requests", "httpx"}
    | {"urllib", "sqlite3", "psycopg", "multiprocessing"}
)
# Whole modules of which no call is deterministic.
FORBIDDEN_CALL_MODULES = frozenset(FORBIDDEN_MODULES - {"uuid", "os"})
FORBIDDEN_CALLS = frozenset(
    {
        "datetime.now",
        "datetime.datetime.now",
        "datetime.datetime.utcnow",
        "datetime.datetime.today",
        "datetime.date.today",
        "uuid.uuid1",
        "uuid.uuid4",
    }
)
OS_PATH_PURE = frozenset({"join", "basename", "dirname", "splitext", "normpath", "split", "sep"})
FORBIDDEN_BUILTINS = frozenset({"open", "input", "breakpoint"})
IO_METHODS = frozenset(
    {"read_text", "read_bytes", "write_text", "write_bytes", "iterdir", "rglob", "touch", "unlink", "mkdir"}
    | {"rmdir", "readlink", "symlink_to"}
)
# Names read as these modules even where the module does not import them (a parameter, a name
# bound elsewhere): a workflow has no business calling anything by these names.
_UNIMPORTED = {name: name for name in (*FORBIDDEN_MODULES, "datetime")} | {"workflow": "temporalio.workflow"}
MUTABLE_FACTORIES = frozenset({"list", "dict", "set", "defaultdict", "deque", "OrderedDict", "Counter"})


@dataclass
class Module:
    """One source module: its tree, and what each imported local name stands for."""

    name: str
    path: Path
    tree: ast.Module
    aliases: dict[str, str] = field(default_factory=dict)
    defs: dict[str, ast.AST] = field(default_factory=dict)


def _passed_through(node: ast.With) -> bool:
    """Whether ``node`` is ``with workflow.unsafe.imports_passed_through():``."""
    return any(
        isinstance(item.context_expr, ast.Call)
        and isinstance(item.context_expr.func, ast.Attribute)
        and item.context_expr.func.attr == "imports_passed_through"
        for item in node.items
    )


def _folder_name(name: str) -> str:
    """``name`` as the source layout spells it: our packages install as ``agent_worker.schemas`` ...
    but live in the folders ``schemas/`` ..., which this check reads (``agent_worker.schemas.tasks``
    -> ``schemas.tasks``)."""
    head, _, rest = name.partition(".")
    return rest if head == "agent_worker" and rest.split(".")[0] in OUR_PACKAGES else name


def _load(name: str, path: Path) -> Module:
    tree = ast.parse(path.read_text(), filename=str(path))
    module = Module(name, path, tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                module.aliases[alias.asname or alias.name.split(".")[0]] = (
                    _folder_name(alias.name) if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                module.aliases[alias.asname or alias.name] = _folder_name(f"{node.module}.{alias.name}")
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            module.defs[node.name] = node
    return module


def _dotted(node: ast.expr, module: Module) -> str | None:
    """The qualified name ``node`` (a name or attribute chain) stands for, through the imports."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    head = module.aliases.get(node.id) or _UNIMPORTED.get(node.id)
    if head is None:
        return ".".join([node.id, *reversed(parts)]) if node.id in FORBIDDEN_BUILTINS and not parts else None
    return _folder_name(".".join([head, *reversed(parts)]))


def _forbidden_call(qualified: str) -> str | None:
    """Why calling ``qualified`` is not deterministic, or None."""
    top = qualified.split(".")[0]
    if qualified in FORBIDDEN_CALLS or top in FORBIDDEN_CALL_MODULES:
        return f"calls {qualified}() (the clock, randomness or I/O: use workflow.now(), uuid4(), random())"
    if top == "os" and not (qualified.startswith("os.path.") and qualified.split(".")[2] in OS_PATH_PURE):
        return f"calls {qualified}() (the process's environment or files)"
    if qualified in FORBIDDEN_BUILTINS:
        return f"calls {qualified}() (I/O in workflow code)"
    return None


class Checker:
    """Reads the workflow code and the code of ours it reaches, collecting offences."""

    def __init__(self, root: Path, workflow_dir: Path) -> None:
        self.root = root
        self.workflow_dir = workflow_dir
        self.modules: dict[str, Module | None] = {}
        self.offences: list[str] = []
        self.seen: set[tuple[str, str]] = set()
        self.queue: list[tuple[Module, ast.AST]] = []

    def module(self, name: str) -> Module | None:
        """Our module called ``name``, or None where it is not ours or not found."""
        if name not in self.modules:
            base = self.root.joinpath(*name.split("."))
            path = next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)
            ours = name.split(".")[0] in OUR_PACKAGES
            self.modules[name] = _load(name, path) if path is not None and ours else None
        return self.modules[name]

    def say(self, module: Module, node: ast.AST, what: str) -> None:
        self.offences.append(f"{module.path}:{getattr(node, 'lineno', 0)}: {what}")

    def follow(self, qualified: str) -> None:
        """Queue the definition ``qualified`` names (a function or class of ours) to be read."""
        parts = qualified.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            module = self.module(".".join(parts[:cut]))
            if module is None:
                continue
            target = module.defs.get(parts[cut])
            if target is None:
                # A name the module imports (a package re-exporting it): follow it there.
                imported = module.aliases.get(parts[cut])
                if imported is not None and imported != qualified:
                    self.follow(".".join([imported, *parts[cut + 1 :]]))
                return
            if (module.name, parts[cut]) not in self.seen:
                self.seen.add((module.name, parts[cut]))
                self.queue.append((module, target))
            return

    def read(self, module: Module, node: ast.AST, *, whole_module: bool) -> None:
        """Check ``node``'s code and queue what of ours it runs."""
        in_workflows = whole_module
        for child in ast.walk(node):
            if isinstance(child, ast.Call):
                qualified = _dotted(child.func, module)
                if isinstance(child.func, ast.Name) and child.func.id in module.defs:
                    qualified = f"{module.name}.{child.func.id}"  # a function of the same module
                if qualified is not None:
                    why = _forbidden_call(qualified)
                    if why:
                        self.say(module, child, why)
                    if (
                        qualified == "temporalio.workflow.patched"
                        and in_workflows
                        and module.path.name != "patches.py"
                    ):
                        self.say(
                            module, child, "calls workflow.patched() (ask through workflows.patches.patched)"
                        )
                    if qualified.split(".")[0] in OUR_PACKAGES:
                        self.follow(qualified)
                if isinstance(child.func, ast.Attribute) and child.func.attr in IO_METHODS:
                    self.say(module, child, f"calls .{child.func.attr}() (file I/O in workflow code)")
            elif isinstance(child, ast.Attribute):
                if _dotted(child, module) == "os.environ":
                    self.say(
                        module, child, "reads os.environ (workflow code sees only its input and history)"
                    )
            elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load) and in_workflows:
                qualified = module.aliases.get(child.id)
                # A model or helper of ours used by name (a payload type, a validator's class).
                if qualified and qualified.split(".")[0] in OUR_PACKAGES - {"activities"}:
                    self.follow(qualified)

    def check_workflow_module(self, module: Module) -> None:
        tree = module.tree
        allowed: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.With) and _passed_through(node):
                allowed |= {id(n) for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in allowed:
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for name in names:
                    if name.split(".")[0] in FORBIDDEN_MODULES:
                        self.say(
                            module,
                            node,
                            f"imports {name} (the clock, randomness or I/O) outside imports_passed_through",
                        )
        self.read(module, tree, whole_module=True)
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
            mutable = isinstance(
                value, ast.List | ast.Dict | ast.Set | ast.ListComp | ast.DictComp | ast.SetComp
            )
            if isinstance(value, ast.Call):
                callee = value.func
                mutable = (
                    callee.id if isinstance(callee, ast.Name) else getattr(callee, "attr", "")
                ) in MUTABLE_FACTORIES
            if mutable:
                self.say(
                    module,
                    statement,
                    f"module-level mutable state {', '.join(names)} (every task on a worker shares it)",
                )

    def run(self) -> tuple[int, int]:
        files = sorted(self.workflow_dir.rglob("*.py"))
        for path in files:
            relative = (
                path.relative_to(self.root).with_suffix("") if path.is_relative_to(self.root) else path.stem
            )
            name = ".".join(Path(relative).parts).removesuffix(".__init__")
            module = _load(name, path)
            self.modules.setdefault(name, module)
            self.check_workflow_module(module)
        while self.queue:
            module, node = self.queue.pop()
            self.read(module, node, whole_module=False)
        return len(files), len(self.seen)


def main(argv: list[str]) -> int:
    root = Path(argv[1]).resolve() if len(argv) > 1 else Path(__file__).resolve().parent.parent
    workflow_dir = root / "workflows" if (root / "workflows").is_dir() else root
    checker = Checker(root, workflow_dir)
    files, reached = checker.run()
    for offence in dict.fromkeys(checker.offences):
        print(offence)
    if checker.offences:
        return 1
    print(f"workflows: {files} modules and {reached} definitions of ours they run, deterministic")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
