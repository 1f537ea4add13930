"""One owner of the protocol: the ``AgentTask`` workflow's type, signal, update and query names appear
as strings only in ``workflows/`` (which declares them), ``agent_worker/client.py`` (which owns the
client side) and ``schemas/visibility.py`` (the names as text, for what cannot import the workflow:
a visibility query, the doctor's activity). Everything else (CLI, inbox, bench, tests) reaches them
through typed references to the workflow's handlers (``handle.query(AgentTaskWorkflow.status)``) or
through the client.

The check reads the source with ``ast``, so a dict key ``"status"`` in JSON output is not a hit: a
handler name is a hit only as the first argument of a call that names a workflow handler
(``.query``, ``.signal``, ``.execute_update`` ...) or after ``--name`` in a command line (the
Temporal CLI's); the workflow type is a hit as any string constant other than a docstring, alone or
quoted inside a visibility query."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from agent_worker.schemas.visibility import STATUS_QUERY

from agent_worker.client import DECISION_SIGNAL, DECISION_UPDATE, INPUT_SIGNAL, PENDING_QUERY, WORKFLOW_TYPE

REPO = Path(__file__).resolve().parent.parent
OWNERS = {REPO / "workflows", REPO / "agent_worker" / "client.py", REPO / "schemas" / "visibility.py"}
SKIPPED = {REPO / "tests" / "histories", REPO / "docs"}
HANDLER_CALLS = {
    "query",
    "signal",
    "execute_update",
    "start_update",
    "execute_update_with_start_workflow",
    "start_update_with_start_workflow",
    "get_update_handle",
}
WORKFLOW_CALLS = {"start_workflow", "execute_workflow", "start_child_workflow", "execute_child_workflow"}
HANDLER_KEYWORDS = {"start_signal", "update", "query", "signal"}
# The names the brief and the issue list; the check also takes whatever the workflow declares.
LISTED = {"status", "pending_approvals", "decide", "submit_decision", "add_input"}


def declared_names() -> tuple[str, set[str]]:
    """The workflow type and the handler names ``AgentTaskWorkflow`` declares, read from its source."""
    tree = ast.parse((REPO / "workflows" / "agent_task.py").read_text())
    [cls] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "AgentTaskWorkflow"]
    kinds: dict[str, set[str]] = {"defn": set(), "handler": set()}
    for node in [cls, *cls.body]:
        for deco in getattr(node, "decorator_list", []):
            if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute)):
                continue
            name = next((k.value for k in deco.keywords if k.arg == "name"), None)
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                kind = "defn" if deco.func.attr == "defn" else "handler"
                if deco.func.attr in {"defn", "signal", "update", "query"}:
                    kinds[kind].add(name.value)
    [workflow_type] = kinds["defn"]
    return workflow_type, kinds["handler"]


def python_files() -> list[Path]:
    """Every Python file of the project outside the owners (virtualenvs, caches and dot-dirs too)."""
    found = []
    for path in sorted(REPO.rglob("*.py")):
        parts = path.relative_to(REPO).parts
        if any(p.startswith(".") or p in {"__pycache__", "node_modules", "build"} for p in parts):
            continue
        if any(p.endswith(".egg-info") for p in parts):
            continue
        if any(path == owner or owner in path.parents for owner in OWNERS | SKIPPED):
            continue
        found.append(path)
    return found


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings (module, class, function, attribute)."""
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for stmt in body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                ids.add(id(stmt.value))
    return ids


def hits(source: str, workflow_type: str, handlers: set[str]) -> list[tuple[int, str]]:
    """``(line, what)`` for each protocol name used as a string in ``source``."""
    tree = ast.parse(source)
    quoted = re.compile(rf"""(^|['"]){re.escape(workflow_type)}(['"]|$)""")
    skip = docstrings(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            first = node.args[0] if node.args else None
            names = handlers if node.func.attr in HANDLER_CALLS else set()
            if node.func.attr in WORKFLOW_CALLS:
                names = {workflow_type}
            if isinstance(first, ast.Constant) and first.value in names:
                found.append((node.lineno, f".{node.func.attr}({first.value!r}, ...)"))
                skip.add(id(first))
            for keyword in node.keywords:
                value = keyword.value
                if (
                    keyword.arg in HANDLER_KEYWORDS
                    and isinstance(value, ast.Constant)
                    and value.value in handlers
                ):
                    found.append((node.lineno, f"{keyword.arg}={value.value!r}"))
        elif isinstance(node, ast.List | ast.Tuple):  # an argv for the Temporal CLI: --name <handler>
            for flag, value in zip(node.elts, node.elts[1:], strict=False):
                if (
                    isinstance(flag, ast.Constant)
                    and flag.value == "--name"
                    and isinstance(value, ast.Constant)
                    and value.value in handlers
                ):
                    found.append((value.lineno, f"--name {value.value!r}"))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in skip
            and quoted.search(node.value)
        ):
            found.append((node.lineno, f"workflow type in {node.value!r}"))
    return sorted(found)


def test_the_names_checked_are_the_ones_the_workflow_declares() -> None:
    """The workflow declares the type and every handler name the client module spells, and every
    handler the issue lists, so the check below looks for the real names (a rename in the workflow
    would not silence it, nor leave the client calling a name nobody answers)."""
    workflow_type, handlers = declared_names()
    assert workflow_type == WORKFLOW_TYPE
    assert handlers >= LISTED
    assert DECISION_SIGNAL in handlers
    assert STATUS_QUERY in handlers
    # The client names its handlers as text (it imports no workflow code): each is a declared one.
    assert {DECISION_UPDATE, INPUT_SIGNAL, PENDING_QUERY} <= handlers


def test_the_check_finds_names_in_protocol_positions_and_ignores_other_uses() -> None:
    """A handler name as a query, signal or update name, and the workflow type as a start argument or
    inside a visibility query, are found; the same words as a dict key, a JSON field or a docstring
    are not."""
    workflow_type, handlers = declared_names()
    bad = f'''
handle.query("status", result_type=TaskStatus)
await h.signal(
    "submit_decision", payload)
await h.execute_update("decide", raw, rpc_timeout=t)
await client.start_workflow("{workflow_type}", spec, id="x", task_queue=q)
QUERY = f"WorkflowType = '{workflow_type}' AND TaskQueue = '{{q}}'"
await client.start_workflow(Run.run, spec, id="x", task_queue=q, start_signal="add_input")
subprocess.run(["temporal", "workflow", "signal", "--name", "submit_decision"])
'''
    assert [line for line, _ in hits(bad, workflow_type, handlers)] == [2, 3, 5, 6, 7, 8, 9]
    fine = f'''
"""The ``{workflow_type}`` workflow answers ``status``."""
row = {{"status": "ok", "decide": 1}}
print(json.dumps({{"status": status}}))
parser.add_parser("status")
argv = ["agent-worker", "status", "--name", "x"]
await handle.query(AgentTaskWorkflow.status)
await client.start_workflow("BareNoop", 1, id="w", task_queue=q)
'''
    assert hits(fine, workflow_type, handlers) == []


def test_no_protocol_name_appears_as_a_string_outside_the_workflow_and_the_client_module() -> None:
    """CLI, inbox, bench, tests, examples and the rest use typed handler references or the client;
    any file that spells a workflow, signal, update or query name as a string is listed."""
    workflow_type, handlers = declared_names()
    files = python_files()
    assert REPO / "tests" / "conftest.py" in files and REPO / "inbox" / "service.py" in files
    found = [
        f"{path.relative_to(REPO)}:{line}: {what}"
        for path in files
        for line, what in hits(path.read_text(), workflow_type, handlers)
    ]
    assert found == [], "protocol names spelled as strings:\n" + "\n".join(found)
