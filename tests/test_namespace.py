"""One namespace (issue 39, item 4): everything of ours is imported as ``agent_worker.*``, and its
public surface is pinned here by shape.

In a checkout the folders at the root (``schemas/``, ``workflows/`` ...) are the subpackages
``agent_worker.schemas`` ...: pyproject.toml maps them with ``package-dir`` for the wheel, and
``agent_worker/__init__.py`` lists the root in its ``__path__`` when run from the source. The wheel
itself (one top-level name) and a team's own ``schemas``/``workflows`` beside a worker are proved in
tests/test_install_matrix.py. A change to a pinned shape below is a change to the public API: make
it on purpose, with the docs and a release note.
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import agent_worker
import agent_worker.testing
from agent_worker.client import AgentWorkerClient

REPO = Path(__file__).resolve().parent.parent
# The source folders installed as agent_worker.<folder>.
FOLDERS = ("activities", "api", "cli", "examples", "inbox", "schemas", "security", "telemetry", "workflows")
# Each public name of ``agent_worker``: a callable's parameters (``name=`` has a default, ``*`` starts
# the keyword-only ones), a model's required fields, an error's base. The Agents SDK's ``Agent`` and
# ``function_tool`` are re-exported as they are and pinned by that SDK.
PUBLIC: dict[str, str] = {
    "AgentRegistration": (
        "(name, build, scripted_model=, max_model_calls=, description=, model=, fallback=, mcp=, "
        "compact_after_tokens=, scripted_models=, version=)"
    ),
    "AgentWorkerClient": "(client, task_queue=)",
    "AgentWorkerError": "error: Exception",
    "AgentWorkerPlugin": "(config, *, artifact_store=)",
    "ApprovalDecision": "model: decision, principal, request_id, version",
    "ApprovalRequest": "model: action, approvers, deadline, request_id, requested_at, version",
    "AwaitingTask": "(task_id, tenant, agent, requests=, error=, approvers=, phase=, prompt=, batch=)",
    "Budgets": "model: ",
    "BusinessWrite": "model: payload, record_type",
    "ConversationModel": "()",
    "Decision": (
        "(request_id, kind, principal, version=, reason=, edited_args=, edit_given=, answer=, "
        "answer_typed=, remember=)"
    ),
    "DecisionKind": "enum",
    "DecisionOutcome": "model: accepted, phase, request_id",
    "DecisionRefused": "error: AgentWorkerError",
    "Delegation": "model: agent, prompt",
    "Event": "model: at, event_id, phase, seq, task_id, type",
    "EventType": "enum",
    "Evidence": "model: approvals, artifacts, commands, inputs, writes",
    "InputFile": "model: name",
    "InvalidDecision": "error: AgentWorkerError",
    "McpRules": "(server, read=, write=, sandbox=, unlisted=, timeout_seconds=, max_attempts=, network=)",
    "McpWrite": "(key_argument=, lookup_tool=)",
    "OverlapPolicy": "enum",
    "PolicyRule": "model: decision",
    "PolicySpec": "model: ",
    "ProposedAction": "model: arguments, call_id, effect, operation, tool, version",
    "SandboxCommand": "model: argv",
    "ScheduleExists": "error: AgentWorkerError",
    "ScheduleNotFound": "error: AgentWorkerError",
    "ScheduleView": "model: schedule_id",
    "TaskEnded": "error: AgentWorkerError",
    "TaskInput": "model: spec",
    "TaskNotFound": "error: AgentWorkerError",
    "TaskPhase": "enum",
    "TaskRef": "(task_id, run_id, started)",
    "TaskResult": "model: evidence, phase, task_id, usage",
    "TaskSchedule": "model: name, spec",
    "TaskSpec": "model: agent, prompt",
    "TaskStatus": "model: agent, budgets, pending, phase, task_id, tenant, turn, usage",
    "ToolError": "error: AgentError",
    "WorkerUnreachable": "error: AgentWorkerError",
    "ask_human": "object: FunctionTool",
    "current_turn": "()",
    "delegate_tool": "(func=, *, name=, description=)",
    "effect_tool": (
        "(func=, *, name=, description=, system=, key_parameter=, lookup=, timeout_seconds=, "
        "max_attempts=, role=, effect=)"
    ),
    "first_user_text": "(items)",
    "is_digest": "(value)",
    "memory_tools": "(agent)",
    "sandbox_tool": "(func=, *, name=, description=)",
    "tool_outputs": "(items)",
    "write_tool": "(func=, *, name=, description=)",
}
TESTING: dict[str, str] = {
    "ConversationModel": "()",
    "Script": "(*steps)",
    "assistant_message": "(text, *, item_id=)",
    "function_call": "(name, arguments, *, call_id, item_id=, namespace=)",
    "local_worker": "(agents=, *, address=, data_dir=, **config)",
}
CLIENT_METHODS: dict[str, str] = {
    "add_input": "(task_id, text, *, principal=)",
    "awaiting": "(*, principal=, tenant=, wait_seconds=)",
    "cancel": "(task_id)",
    "connect": "(address=, *, task_queue=, **overrides)",
    "decide": (
        "(task_id, request_id, decision, principal, *, version=, edited_args=, reason=, answer=, "
        "sign_with=, via=, wait_seconds=, remember=)"
    ),
    "fork": (
        "(task_id, *, at, prompt_edit=, agent_version=, model=, replay_until=, fork_id=, history=, store=)"
    ),
    "handle": "(task_id)",
    "next_request": "(task_id, *, within=, poll=)",
    "pending": "(task_id, *, wait_seconds=)",
    "result": "(task_id)",
    "say": "(task_id, text, *, principal=)",
    "send_decision": "(task_id, decision, *, via=, wait_seconds=)",
    "start": "(spec, task_id=)",
    "status": "(task_id, *, wait_seconds=)",
    "steps": "(task_id, *, history=)",
    "submit": "(task_id, decision, *, signer=, check=, via=, wait_seconds=, read_seconds=, expires_at=)",
}
CONSOLE_SCRIPTS = {"agent-worker": "agent_worker.cli.main:run"}


def shape(value: Any) -> str:
    """What is pinned of a public name (see ``PUBLIC``)."""
    if inspect.isclass(value) and issubclass(value, BaseModel):
        return "model: " + ", ".join(sorted(k for k, f in value.model_fields.items() if f.is_required()))
    if inspect.isclass(value) and issubclass(value, enum.Enum):
        return "enum"
    if inspect.isclass(value) and issubclass(value, BaseException):
        return "error: " + value.__mro__[1].__name__
    if not callable(value):  # an object, such as the built-in ``ask_human`` tool
        return "object: " + type(value).__name__
    out: list[str] = []
    star = False
    for p in inspect.signature(value).parameters.values():
        if p.name == "self":
            continue
        if p.kind is p.VAR_POSITIONAL:
            out.append("*" + p.name)
            star = True
            continue
        if p.kind is p.VAR_KEYWORD:
            out.append("**" + p.name)
            continue
        if p.kind is p.KEYWORD_ONLY and not star:
            out.append("*")
            star = True
        out.append(p.name + ("=" if p.default is not p.empty else ""))
    return "(" + ", ".join(out) + ")"


def test_the_public_names_keep_their_shapes() -> None:
    """Every public name of ``agent_worker`` and ``agent_worker.testing``, and every public method
    of ``AgentWorkerClient``, has exactly its pinned parameters (models: required fields; errors:
    base class)."""
    third_party = {"Agent", "function_tool"}
    assert {
        n: shape(getattr(agent_worker, n)) for n in agent_worker.__all__ if n not in third_party
    } == PUBLIC
    assert {n: shape(getattr(agent_worker.testing, n)) for n in agent_worker.testing.__all__} == TESTING
    methods = {
        n: shape(getattr(AgentWorkerClient, n))
        for n in dir(AgentWorkerClient)
        if not n.startswith("_") and callable(getattr(AgentWorkerClient, n))
    }
    assert methods == CLIENT_METHODS


def test_the_console_script_is_pinned_and_resolves() -> None:
    """pyproject.toml declares exactly the pinned console scripts, each naming an ``agent_worker``
    function that imports."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == CONSOLE_SCRIPTS
    for target in scripts.values():
        module, _, attribute = target.partition(":")
        assert callable(getattr(importlib.import_module(module), attribute))


def test_pyproject_lists_every_package_folder_under_agent_worker() -> None:
    """``[tool.setuptools]`` lists ``agent_worker`` and, under it, every folder with an
    ``__init__.py`` of each source folder, and ``package-dir`` maps each source folder: a new
    package folder left out of the list would be missing from the wheel."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    tree = ["agent_worker"] + [
        ".".join(("agent_worker", *init.parent.relative_to(REPO).parts))
        for folder in FOLDERS
        for init in (REPO / folder).rglob("__init__.py")
        if "__pycache__" not in init.parts
    ]
    assert sorted(setuptools["packages"]) == sorted(tree)
    assert setuptools["package-dir"] == {f"agent_worker.{f}": f for f in FOLDERS}
    assert "py-modules" not in setuptools and "find" not in setuptools.get("packages", {})


def test_from_a_checkout_the_subpackages_are_this_checkouts_folders() -> None:
    """Run from this checkout (its root first on the path, as the tests run), ``agent_worker.schemas``
    and ``agent_worker.workflows`` are this checkout's folders, even where another checkout's
    editable install is on the path too."""
    for folder in ("schemas", "workflows"):
        module = importlib.import_module(f"agent_worker.{folder}")
        assert Path(module.__file__).resolve() == REPO / folder / "__init__.py"
    assert Path(agent_worker.__path__[0]).resolve() == REPO / "agent_worker"


def test_nothing_of_ours_imports_a_folder_by_its_own_name() -> None:
    """No Python file of the repository (package code, tests, benchmarks, scripts, examples)
    imports a source folder by the folder's name (``schemas.tasks`` instead of
    ``agent_worker.schemas.tasks``): in a checkout that would be a second copy of the module, with
    its own classes."""
    found = []
    for path in sorted(REPO.rglob("*.py")):
        rel = path.relative_to(REPO)
        if (
            rel.parts[0].startswith(".")
            or rel.parts[:2] == ("tests", "histories")
            or "__pycache__" in rel.parts
        ):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            found += [f"{rel}:{node.lineno}: {n}" for n in names if n.split(".")[0] in (*FOLDERS, "worker")]
    assert not found, found


def test_the_root_worker_py_still_runs_the_worker_from_a_checkout() -> None:
    """``python worker.py`` (the layout's entry point, not installed) runs the worker's ``main``:
    with no agents configured it stops there, naming the setting."""
    done = subprocess.run(
        [sys.executable, "worker.py"],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "no agents to run" in done.stderr, done.stderr[-2000:]
