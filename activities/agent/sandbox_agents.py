"""The OpenAI Agents SDK's ``SandboxAgent``, run on the task's own contained sandbox.

A ``SandboxAgent`` normally gets a live sandbox session at run time (``RunConfig(sandbox=...)``) and
its capabilities' tools act on that session from inside the run: a command would run inside the
agent turn, on whatever client the run was given, unrecorded and gone with a crash. Here each
capability the worker can make durable becomes an effect tool of the same name, so every call stops
the run like a ``sandbox_tool`` call: the workflow applies the task's policy (and approval), runs it
as a ``sandbox.exec`` command in the task's sandbox (the hardened Docker tier or E2B; the process tier
only where a developer asked for it), records it in the evidence, and gives the result back as the
tool's output. The workspace is the task's sandbox work dir, which outlives a worker's death.

==============  =========================================================================
capability      on the worker
==============  =========================================================================
``Shell``       ``exec_command``: runs ``cmd`` to completion (``sh -c``, or ``shell -lc``) in
                the work dir, or in ``workdir``; ``tty=true`` and ``write_stdin`` (interactive
                sessions a crash would lose) are refused; ``yield_time_ms`` and
                ``max_output_tokens`` are accepted and ignored (the command's timeout is the
                task's sandbox spec, its output is capped by ``model_output_limit_bytes``).
``Filesystem``  ``apply_patch``: a function tool taking the ``*** Begin Patch`` text as
                ``patch`` (the SDK's freeform form needs the Responses API), applied inside the
                sandbox by ``activities/sandbox/apply_patch.py`` (needs ``python3`` in the
                image); ``view_image`` is not offered (``exec_command`` reads files).
``Compaction``  the worker's own compaction step at the capability's threshold (a static
                policy's ``compact_threshold``; the SDK default otherwise), unless the
                registration sets ``compact_after_tokens``: the Responses API's server-side
                compaction would leave an opaque item that the evidence cannot show.
anything else   refused (``Skills``, ``Memory``, custom capabilities): they read and write the
                session from inside the turn, which no durable step can record.
==============  =========================================================================

A manifest with entries, environment, users or groups, a ``run_as`` user and a capability's
``configure_tools`` are refused too: the task's inputs are its workspace, and its sandbox spec sets
the user and limits. Refusals name the agent and what to change (``SandboxAgentRefused``), at worker
start and, should a registration change under a running task, at its next turn (the task hands off).
"""

from __future__ import annotations

import inspect
import shlex
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from agent_worker.activities.agent.registry import agent_graph, handoff_target
from agent_worker.activities.agent.tools import sandbox_tool
from agent_worker.activities.errors import AgentError, ToolPlanError
from agent_worker.schemas.actions import SandboxCommand
from agents import Agent
from agents.sandbox import SandboxAgent
from agents.sandbox.capabilities import Capability, Compaction, Filesystem, Shell, StaticCompactionPolicy
from agents.sandbox.manifest import Manifest

# The applier runs in the sandbox, from its source: it is standalone (standard library only).
APPLY_PATCH_SOURCE = (Path(__file__).parent.parent / "sandbox" / "apply_patch.py").read_text(encoding="utf-8")
COMPACT_ATTR = "_agent_worker_compact_after_tokens"
_BEGIN_PATCH = "*** Begin Patch"

_WORKSPACE_NOTE = (
    "Your workspace is the current directory of every command: the task's input files are there, and "
    "what you write there stays for the rest of the task. Commands run to completion; interactive "
    "sessions (tty, write_stdin) are not available. File paths in patches are relative to it."
)


class SandboxAgentRefused(AgentError):
    """A ``SandboxAgent`` uses something that cannot run as a durable, recorded sandbox step."""

    code = "sandbox_agent_refused"
    retryable = "no"


@sandbox_tool(name="exec_command")
def exec_command(
    cmd: str,
    workdir: str | None = None,
    shell: str | None = None,
    login: bool = True,
    tty: bool = False,
    yield_time_ms: int = 10_000,
    max_output_tokens: int | None = None,
) -> SandboxCommand:
    """Run a shell command in the task's sandbox to completion; returns its exit code, stdout and
    stderr.

    Args:
        cmd: Shell command to execute.
        workdir: Working directory, relative to the workspace (default: the workspace).
        shell: Shell binary to launch (default: sh).
        login: Whether to run the given shell with -l semantics.
        tty: Must be false: interactive sessions are not available.
        yield_time_ms: Accepted and ignored: commands run to completion.
        max_output_tokens: Accepted and ignored: long output is cut by the sandbox.
    """
    del yield_time_ms, max_output_tokens  # the sandbox spec bounds time and output
    if not cmd.strip():
        raise ToolPlanError("exec_command needs a non-empty cmd", operation="agent.plan")
    if tty:
        raise ToolPlanError(
            "exec_command: tty=true asks for an interactive session, which cannot be made durable "
            "here; run the command to completion with tty=false",
            operation="agent.plan",
        )
    script = cmd if not workdir else f"cd {shlex.quote(workdir)} || exit\n{cmd}"
    argv = ["sh", "-c", script] if shell is None else [shell, "-lc" if login else "-c", script]
    return SandboxCommand(argv=argv)


@sandbox_tool(name="apply_patch")
def apply_patch(patch: str) -> SandboxCommand:
    """Edit files in the workspace with a patch: '*** Begin Patch', then per file '*** Add File:
    <path>' (every line '+'), '*** Delete File: <path>', or '*** Update File: <path>' (optionally
    '*** Move to: <path>') with hunks that start with '@@' (optionally followed by a line of the
    file to find first) whose lines start with ' ' (context), '-' (remove) or '+' (add); then
    '*** End Patch'. Paths are relative. Nothing changes unless the whole patch applies.

    Args:
        patch: The patch text, from '*** Begin Patch' to '*** End Patch'.
    """
    if not patch.lstrip().startswith(_BEGIN_PATCH):
        raise ToolPlanError(
            f"apply_patch: the patch must start with {_BEGIN_PATCH!r}", operation="agent.plan"
        )
    return SandboxCommand(argv=["python3", "-c", APPLY_PATCH_SOURCE], stdin=patch)


def durable_agent(agent: Agent[Any]) -> Agent[Any]:
    """``agent`` with every ``SandboxAgent`` it is or reaches by handoff replaced by a plain
    ``Agent`` whose capabilities are durable effect tools (see the module docstring). An agent graph
    without one is returned as it is; one with one is copied whole (cycles included), so the
    registration's agents stay as they were.

    Raises:
        SandboxAgentRefused: a capability, manifest or setting that cannot be made durable, named.
    """
    graph = agent_graph(agent)
    if not any(isinstance(a, SandboxAgent) for a in graph):
        return agent
    copies = {id(a): _plain(a) if isinstance(a, SandboxAgent) else a.clone() for a in graph}
    for original in graph:
        copies[id(original)].handoffs = [_handoff(original, item, copies) for item in original.handoffs]
    return copies[id(agent)]


def compact_after_tokens(agent: Agent[Any]) -> int | None:
    """The compaction threshold a converted agent's ``Compaction`` capability asks for, or None."""
    return getattr(agent, COMPACT_ATTR, None)


def _handoff(owner: Agent[Any], item: Any, copies: dict[int, Agent[Any]]) -> Any:
    """A handoff entry of ``owner`` pointing at the copies."""
    if isinstance(item, Agent):
        return copies[id(item)]
    target = handoff_target(item)
    if isinstance(target, SandboxAgent):
        raise SandboxAgentRefused(
            f"agent {owner.name!r} reaches sandbox agent {target.name!r} through handoff(); list "
            "the agent itself in handoffs, so the worker can run its capabilities durably",
            operation="agent.turn",
        )
    return item


def _plain(agent: SandboxAgent[Any]) -> Agent[Any]:
    """The plain ``Agent`` that runs ``agent`` durably."""
    _refuse_settings(agent)
    tools: list[Any] = []
    compact: int | None = None
    for capability in agent.capabilities:
        if getattr(capability, "configure_tools", None) is not None:
            raise _refused(
                agent, capability, "its configure_tools callback replaces tools the worker must own"
            )
        if isinstance(capability, Shell):
            tools.append(exec_command)
        elif isinstance(capability, Filesystem):
            tools.append(apply_patch)
        elif isinstance(capability, Compaction):
            policy = capability.policy or StaticCompactionPolicy()
            compact = policy.compaction_threshold({})
        else:
            raise _refused(
                agent,
                capability,
                "it reads and writes the sandbox session from inside the turn, which no durable step "
                "can record; remove it (exec_command and apply_patch remain)",
            )
    values = {f.name: getattr(agent, f.name) for f in fields(Agent) if f.init}
    values["tools"] = [*agent.tools, *tools]
    values["instructions"] = _instructions(agent, list(agent.capabilities))
    plain: Agent[Any] = Agent(**values)
    if compact is not None:
        setattr(plain, COMPACT_ATTR, compact)
    return plain


def _refuse_settings(agent: SandboxAgent[Any]) -> None:
    manifest = agent.default_manifest
    if manifest is not None and (
        manifest.entries or manifest.environment.value or manifest.users or manifest.groups
    ):
        raise SandboxAgentRefused(
            f"sandbox agent {agent.name!r}: its default_manifest has entries, environment, users or "
            "groups; the task's inputs are its workspace (TaskSpec.inputs) and its sandbox spec sets "
            "the rest",
            operation="agent.turn",
        )
    if agent.run_as is not None:
        raise SandboxAgentRefused(
            f"sandbox agent {agent.name!r}: run_as is set; commands run as the sandbox tier's own "
            "unprivileged user",
            operation="agent.turn",
        )


def _refused(agent: SandboxAgent[Any], capability: Capability, why: str) -> SandboxAgentRefused:
    return SandboxAgentRefused(
        f"sandbox agent {agent.name!r}: capability {capability.type!r} cannot be made durable here: {why}",
        operation="agent.turn",
    )


def _instructions(agent: SandboxAgent[Any], capabilities: Sequence[Capability]) -> Any:
    """The agent's instructions, then each capability's own, then where the workspace is."""
    own = agent.instructions
    base = agent.base_instructions

    async def instructions(context: Any, current: Agent[Any]) -> str:
        parts: list[str | None] = []
        for value in (base, own):
            result = value(context, current) if callable(value) else value
            parts.append(await result if inspect.isawaitable(result) else result)
        manifest = agent.default_manifest or Manifest()
        parts.extend([await capability.instructions(manifest) for capability in capabilities])
        parts.append(_WORKSPACE_NOTE)
        return "\n\n".join(p for p in parts if p)

    return instructions


__all__ = [
    "APPLY_PATCH_SOURCE",
    "SandboxAgentRefused",
    "apply_patch",
    "compact_after_tokens",
    "durable_agent",
    "exec_command",
]
