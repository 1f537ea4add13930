#!/usr/bin/env python3
"""Check the project's import graph: no cycle, and no import upward across the layers.

Usage: ``python scripts/check_imports.py [ROOT]`` (ROOT defaults to the repository this script is in).
Prints every offending edge and exits 1, or prints a one-line summary and exits 0.

The graph is built with ``ast`` from the source alone (nothing is imported): one node per module of
the project's packages, named as it is imported (the folder ``schemas/`` installs as
``agent_worker.schemas``), one edge per ``import`` or ``from ... import`` anywhere in a module,
including imports inside functions and under ``if TYPE_CHECKING:``. A cycle through a type-only import
is still a cycle: it still ties the two modules together, and it is what the type checker follows.
``from package import name`` counts as an import of ``package.name`` when that is a module, else of
``package`` itself. Importing ``a.b`` is not counted as importing ``a``'s ``__init__`` (every package
that re-exports its submodules would otherwise be a cycle). A module of ours imported by its
folder's name (``from schemas.tasks import ...``) is refused too: installed, only ``agent_worker``
is importable at top level, and in a checkout it would be a second copy of the module.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# The project's source folders (and the root module worker.py), each in a layer. A module may import
# modules of its own layer and of the layers below it, never one above. Lowest first:
#   0. schemas: the payload contracts every other layer speaks; they import nothing of the project.
#   1. security, telemetry: signing, redaction, logs and metrics; they only read schemas.
#   2. activities: every side effect; they never import the workflows that schedule them.
#   3. workflows: the lifecycle; they schedule activities and never import an edge (CLI, inbox).
#   4. agent_worker, worker, cli, inbox, api, examples: the public face (with the worker builder,
#      agent_worker.worker; the root worker.py re-exports it), the command line, the approvals inbox,
#      the HTTP API and the demo agents, the edges through which people and programs use everything below.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("schemas",),
    ("security", "telemetry"),
    ("activities",),
    ("workflows",),
    ("agent_worker", "worker", "cli", "inbox", "api", "examples"),
)
# Imports the layer order allows but the design forbids all the same.
FORBIDDEN: tuple[tuple[str, str, str], ...] = ()
TOP_LEVEL = tuple(name for layer in LAYERS for name in layer)
# What installs as agent_worker.<folder> (package-dir in pyproject.toml); the rest keep their names.
NAMESPACE = "agent_worker"
FOLDERS = tuple(name for name in TOP_LEVEL if name not in (NAMESPACE, "worker"))


@dataclass(frozen=True, order=True)
class Edge:
    """``source`` imports ``target`` (both dotted module names) at ``line`` of ``path``."""

    source: str
    target: str
    path: str = ""
    line: int = 0

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}: " if self.path else ""
        return f"{where}{self.source} -> {self.target}"


def modules(root: Path, top_level: Iterable[str] = TOP_LEVEL) -> dict[str, Path]:
    """Every module of the project's top-level packages under ``root``, by dotted name."""
    found: dict[str, Path] = {}
    for name in top_level:
        single = root / f"{name}.py"
        if single.is_file():
            found[name] = single
        package = root / name
        if not (package / "__init__.py").is_file():
            continue
        for path in sorted(package.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if "__pycache__" in parts or not all(p.isidentifier() for p in parts):
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((NAMESPACE, *parts) if name in FOLDERS else parts)] = path
    return found


def _imported(
    module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: Mapping[str, Path]
) -> list[str]:
    """The dotted names ``node`` imports, relative imports resolved against ``module``. For
    ``from a import b``: the module ``a.b`` when there is one, else ``a`` itself."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        anchor = package[: len(package) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]


def edges(root: Path, top_level: Iterable[str] = TOP_LEVEL) -> list[Edge]:
    """The project's import edges (between its own modules), in source order."""
    known = modules(root, top_level)
    out: list[Edge] = []
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        seen: set[str] = set()
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for name in _imported(module, path.name == "__init__.py", node, known):
                target = _owner(name, known)
                if target is None or target == module or target in seen:
                    continue
                seen.add(target)
                out.append(Edge(module, target, str(path.relative_to(root)), node.lineno))
    return sorted(out, key=lambda e: (e.path, e.line, e.target))


def _owner(name: str, known: Mapping[str, Path]) -> str | None:
    """The project module ``name`` is, or lies in (``a.b.C`` -> ``a.b``); None outside the project."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def cycles(graph: Iterable[Edge]) -> list[list[Edge]]:
    """The import cycles in ``graph``: for each group of modules that import one another (a strongly
    connected component, Tarjan's algorithm), the edges within it."""
    graph = list(graph)
    successors: dict[str, list[str]] = {}
    for edge in graph:
        successors.setdefault(edge.source, []).append(edge.target)
        successors.setdefault(edge.target, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[set[str]] = []
    counter = 0
    for start in sorted(successors):
        if start in index:
            continue
        # Iterative depth-first search: a deep import chain must not hit the recursion limit.
        work: list[tuple[str, int]] = [(start, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            targets = successors[node]
            if child < len(targets):
                work.append((node, child + 1))
                target = targets[child]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                components.append(component)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    found = []
    for component in components:
        inside = [e for e in graph if e.source in component and e.target in component]
        if len(component) > 1 or inside:
            found.append(sorted(inside))
    return sorted(found)


def _folder(module: str) -> str:
    """The source folder (or root module) ``module`` lives in: ``agent_worker.schemas.tasks`` ->
    ``schemas``, ``agent_worker.client`` -> ``agent_worker``."""
    parts = module.split(".")
    return parts[1] if parts[0] == NAMESPACE and len(parts) > 1 and parts[1] in FOLDERS else parts[0]


def _layer(module: str, layers: tuple[tuple[str, ...], ...]) -> int | None:
    top = _folder(module)
    return next((i for i, layer in enumerate(layers) if top in layer), None)


def upward(
    graph: Iterable[Edge],
    layers: tuple[tuple[str, ...], ...] = LAYERS,
    forbidden: Iterable[tuple[str, str, str]] = FORBIDDEN,
) -> list[tuple[Edge, str]]:
    """The edges that import upward (into a higher layer, or an import ``forbidden`` names), each
    with why it is refused."""
    rules = list(forbidden)
    found = []
    for edge in graph:
        source, target = _layer(edge.source, layers), _layer(edge.target, layers)
        if source is None or target is None:
            continue
        source_top, target_top = _folder(edge.source), _folder(edge.target)
        if target > source:
            found.append((edge, f"{source_top} (layer {source}) imports {target_top} (layer {target})"))
            continue
        for rule_source, rule_target, why in rules:
            if source_top == rule_source and target_top == rule_target:
                found.append((edge, why))
    return found


def by_folder_name(root: Path) -> list[str]:
    """Imports, in the project's modules, of a source folder by its own name instead of
    ``agent_worker.<folder>``, one line each."""
    found = []
    for path in modules(root).values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.split(".")[0] in FOLDERS:
                    found.append(
                        f"{path.relative_to(root)}:{node.lineno}: imports {name} by its folder's name"
                        f" (the package is {NAMESPACE}.{name})"
                    )
    return found


def check(root: Path) -> list[str]:
    """Every problem in the import graph under ``root``, one line each (empty: none)."""
    graph = edges(root)
    problems = by_folder_name(root)
    for cycle in cycles(graph):
        members = sorted({e.source for e in cycle})
        problems.append(f"import cycle through {len(members)} modules: {', '.join(members)}")
        problems += [f"    {edge}" for edge in cycle]
    for edge, why in upward(graph):
        problems.append(f"upward import: {edge} ({why})")
    return problems


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    problems = check(root)
    for line in problems:
        print(line)
    if problems:
        print(f"import graph: {sum(not p.startswith('    ') for p in problems)} problem(s)")
        return 1
    graph = edges(root)
    print(f"import graph: {len(modules(root))} modules, {len(graph)} imports, no cycle, nothing upward")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
