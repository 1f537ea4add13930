"""The OpenAI Agents SDK's ``SandboxAgent`` on the worker: its shell and filesystem capabilities become
durable, policy-gated sandbox commands in the task's hardened Docker sandbox; what cannot be made
durable is refused by name; the in-sandbox patch applier is all-or-nothing and idempotent."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import docker
import pytest
from agent_worker.activities.agent import AgentRegistration, AgentRegistry
from agent_worker.activities.agent.sandbox_agents import (
    APPLY_PATCH_SOURCE,
    SandboxAgentRefused,
    compact_after_tokens,
    durable_agent,
)
from agent_worker.activities.agent.tools import effect_of, plan_call
from agent_worker.activities.errors import ToolPlanError
from agent_worker.activities.events import JsonlEventSink
from agent_worker.activities.sandbox.apply_patch import main as apply_patch
from agent_worker.schemas.actions import EffectClass, SandboxCommand
from agent_worker.schemas.config import ConfigError
from agent_worker.schemas.events import EventType
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow
from agents import Agent, handoff
from agents.sandbox import Manifest, SandboxAgent
from agents.sandbox.capabilities import Filesystem, Memory, Shell, Skill, Skills
from agents.sandbox.entries import File
from temporalio.client import Client

from tests.helpers.agents import CODER_PATCH
from tests.helpers.containers import containers_of
from tests.helpers.support import (
    DevServer,
    TaskEnv,
    assert_replays,
    decision,
    make_config,
    sigkill,
    worker_process,
)

CALC = "def add(a, b):\n    return a - b\n"
TEST_CALC = "from calc import add\nassert add(2, 3) == 5, add(2, 3)\nprint('tests pass')\n"


# ---- the patch applier ------------------------------------------------------------------------


def test_a_patch_adds_updates_moves_and_deletes_and_a_second_run_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One patch adds a file, updates one by context, moves and edits another, deletes a fourth;
    applied again, it reports every change as already in place and the files stay as they are."""
    (tmp_path / "calc.py").write_text(CALC)
    (tmp_path / "old.py").write_text("x = 1\ny = 2\n")
    (tmp_path / "gone.txt").write_text("bye\n")
    patch = (
        "*** Begin Patch\n*** Add File: pkg/new.txt\n+hello\n+world\n"
        "*** Update File: calc.py\n@@ def add(a, b):\n-    return a - b\n+    return a + b\n"
        "*** Update File: old.py\n*** Move to: moved.py\n@@\n x = 1\n-y = 2\n+y = 3\n"
        "*** Delete File: gone.txt\n*** End Patch\n"
    )
    assert apply_patch(patch, str(tmp_path)) == 0
    first = capsys.readouterr().out
    assert first.splitlines() == ["Done!", "A pkg/new.txt", "M calc.py", "M old.py -> moved.py", "D gone.txt"]
    after = {p.name: p.read_text() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == {
        "new.txt": "hello\nworld\n",
        "calc.py": "def add(a, b):\n    return a + b\n",
        "moved.py": "x = 1\ny = 3\n",
    }

    assert apply_patch(patch, str(tmp_path)) == 0
    assert "M calc.py (already applied)" in capsys.readouterr().out
    assert {p.name: p.read_text() for p in tmp_path.rglob("*") if p.is_file()} == after


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ("*** Update File: calc.py\n", "must start with '*** Begin Patch'"),
        ("*** Begin Patch\n*** Update File: calc.py\n@@\n-nope\n+x\n*** End Patch", "hunk 1 does not match"),
        ("*** Begin Patch\n*** Add File: ../escape.txt\n+x\n*** End Patch", "outside the work dir"),
        ("*** Begin Patch\n*** Add File: /etc/x\n+x\n*** End Patch", "relative to the work dir"),
        ("*** Begin Patch\n*** Update File: missing.py\n@@\n-a\n+b\n*** End Patch", "does not exist"),
        ("*** Begin Patch\n*** Delete File: calc.py\nextra\n*** End Patch", "line 5: nothing follows"),
    ],
)
def test_a_bad_patch_changes_nothing_and_says_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], patch: str, message: str
) -> None:
    """A malformed, mismatching or escaping patch exits 1 naming the problem, and even the file
    operations before the bad one are not written."""
    (tmp_path / "calc.py").write_text(CALC)
    good_first = patch.replace("*** Begin Patch\n", "*** Begin Patch\n*** Add File: first.txt\n+1\n", 1)
    assert apply_patch(good_first, str(tmp_path)) == 1
    err = capsys.readouterr().err
    assert message in err and "nothing was changed" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calc.py"]
    assert (tmp_path / "calc.py").read_text() == CALC


def test_the_applier_runs_from_its_source_with_the_patch_on_stdin(tmp_path: Path) -> None:
    """As the sandbox runs it: ``python3 -c <source>`` in the work dir, the patch on stdin."""
    (tmp_path / "calc.py").write_text(CALC)
    run = subprocess.run(
        [sys.executable, "-c", APPLY_PATCH_SOURCE],
        input=CODER_PATCH,
        text=True,
        cwd=tmp_path,
        capture_output=True,
    )
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"


# ---- the agent, made durable ----------------------------------------------------------------


def _tools(agent: Agent) -> dict[str, object]:
    return {t.name: t for t in agent.tools}  # type: ignore[attr-defined]


def test_shell_and_filesystem_become_sandbox_effect_tools_and_the_rest_stays() -> None:
    """exec_command and apply_patch are effect tools of the sandbox class (they stop the run like
    any sandbox_tool); the agent's own tools, name and handoffs stay; a plain agent handing off to a
    sandbox agent reaches the durable one."""
    coder = SandboxAgent(name="coder", instructions="Code.", capabilities=[Shell(), Filesystem()])
    triage = Agent(name="triage", instructions="Route.", handoffs=[coder])
    durable = durable_agent(triage)
    assert durable is not triage and not isinstance(durable.handoffs[0], SandboxAgent)
    [specialist] = durable.handoffs
    assert specialist.name == "coder" and set(_tools(specialist)) == {"exec_command", "apply_patch"}
    for tool in _tools(specialist).values():
        declaration = effect_of(tool)
        assert declaration is not None and declaration.effect is EffectClass.SANDBOX
        assert tool.needs_approval is True  # type: ignore[attr-defined]
    plain = Agent(name="plain", instructions="Hi.")
    assert durable_agent(plain) is plain


def test_a_handoff_cycle_through_a_sandbox_agent_is_copied_whole() -> None:
    """Triage and a sandbox agent that hands back to it: the copies point at each other, and the
    registration's agents are left as they were."""
    coder = SandboxAgent(name="coder", capabilities=[Shell()])
    triage = Agent(name="triage", handoffs=[coder])
    coder.handoffs = [triage]
    durable = durable_agent(triage)
    [specialist] = durable.handoffs
    assert specialist.handoffs == [durable] and set(_tools(specialist)) == {"exec_command"}
    assert triage.handoffs == [coder] and coder.handoffs == [triage] and coder.tools == []


def test_exec_command_plans_a_shell_command_and_refuses_interactive_sessions() -> None:
    """A command runs under sh -c (cd'ing to its workdir first); tty=true is refused as not durable."""
    agent = durable_agent(SandboxAgent(name="coder", capabilities=[Shell()]))
    tool = _tools(agent)["exec_command"]
    command = plan_call(tool, {"cmd": "ls", "workdir": "src dir"})  # type: ignore[arg-type]
    assert isinstance(command, SandboxCommand)
    assert command.argv == ["sh", "-c", "cd 'src dir' || exit\nls"]
    with pytest.raises(ToolPlanError, match="interactive session"):
        plan_call(tool, {"cmd": "top", "tty": True})  # type: ignore[arg-type]
    patch = plan_call(
        _tools(durable_agent(SandboxAgent(name="c", capabilities=[Filesystem()])))["apply_patch"],  # type: ignore[arg-type]
        {"patch": CODER_PATCH},
    )
    assert patch.argv[:2] == ["python3", "-c"] and patch.stdin == CODER_PATCH  # type: ignore[union-attr]


async def test_capability_instructions_reach_the_model_with_the_workspace_note() -> None:
    """The converted agent's instructions are the agent's own, then the shell capability's, then
    where the workspace is."""
    agent = durable_agent(SandboxAgent(name="coder", instructions="Make tests pass.", capabilities=[Shell()]))
    text = await agent.get_system_prompt(None)  # type: ignore[arg-type]
    assert text is not None and text.startswith("Make tests pass.")
    assert "exec_command" in text and "Your workspace is the current directory" in text


def test_the_compaction_capability_sets_the_worker_s_compaction_threshold() -> None:
    """Compaction runs as the worker's own compaction step, at the capability's threshold."""
    from agents.sandbox.capabilities import Compaction, StaticCompactionPolicy

    agent = durable_agent(
        SandboxAgent(name="c", capabilities=[Compaction(policy=StaticCompactionPolicy(threshold=5000))])
    )
    assert compact_after_tokens(agent) == 5000


@pytest.mark.parametrize(
    ("agent", "named"),
    [
        (SandboxAgent(name="c", capabilities=[Shell(), Memory()]), "capability 'memory'"),
        (
            SandboxAgent(
                name="c", capabilities=[Skills(skills=[Skill(name="s", description="d", content="c")])]
            ),
            "capability 'skills'",
        ),
        (SandboxAgent(name="c", capabilities=[Shell(configure_tools=lambda s: None)]), "configure_tools"),
        (SandboxAgent(name="c", run_as="root"), "run_as"),
        (
            SandboxAgent(name="c", default_manifest=Manifest(entries={"a.txt": File(content=b"x")})),
            "default_manifest",
        ),
        (Agent(name="t", handoffs=[handoff(SandboxAgent(name="c"))]), "through handoff()"),
    ],
    ids=["memory", "skills", "configure_tools", "run_as", "manifest", "handoff-object"],
)
def test_what_cannot_be_made_durable_is_refused_by_name(agent: Agent, named: str, tmp_path: Path) -> None:
    """Each refusal names the agent and what cannot run durably, and the worker refuses to start
    with such an agent rather than fail its tasks."""
    with pytest.raises(SandboxAgentRefused, match=named):
        durable_agent(agent)
    registry = AgentRegistry([AgentRegistration(name="bad", build=lambda: agent)])
    from agent_worker.activities.agent import AgentActivities
    from agent_worker.activities.artifacts import LocalArtifactStore

    with pytest.raises(ConfigError, match=f"agent 'bad'.*{named}"):
        AgentActivities(registry, LocalArtifactStore(tmp_path / "artifacts"), make_config(tmp_path / "data"))


# ---- end to end, hardened Docker tier ---------------------------------------------------------


async def test_a_sandbox_agent_patches_and_tests_in_docker_and_a_killed_worker_loses_nothing(
    client: Client, dev_server: DevServer, tmp_path: Path, docker_image: str
) -> None:
    """The coder runs the failing test, proposes a patch (gated by the policy), the worker is
    SIGKILLed while the patch waits, the approval arrives with no worker up; a new worker applies the
    patch in the same container, the test passes, and runs.log shows each test command ran once."""
    config = make_config(tmp_path / "data", sandbox_backend="docker", docker_image=docker_image)
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    spec = {
        "agent": "coder",
        "prompt": "Make test_calc.py pass.",
        "inputs": [{"name": "calc.py", "content": CALC}, {"name": "test_calc.py", "content": TEST_CALC}],
        "policy": {"rules": [{"tool": "apply_patch", "decision": "require_approval", "approvers": ["lead"]}]},
    }
    async with worker_process(env, tmp_path / "worker-1.log") as first:
        handle = await env.start(spec)
        status = await env.awaiting_approval(handle)
        [request] = status.pending
        assert request.action.tool == "apply_patch" and request.action.arguments == {"patch": CODER_PATCH}
        [container] = containers_of(handle.id)
        container_name = docker.from_env().containers.get(container).name
        await sigkill(first)
    await handle.signal(AgentTaskWorkflow.submit_decision, decision(request, "approve", "lead"))
    async with worker_process(env, tmp_path / "worker-2.log"):
        result: TaskResult = await asyncio.wait_for(handle.result(), 120)
    log = (tmp_path / "worker-2.log").read_text()[-3000:]
    assert result.phase is TaskPhase.COMPLETED, (result.reason, log)
    assert result.final_output == "Fixed: add() adds."

    failing, patched, passing, shown = result.evidence.commands
    assert failing.exit_code == 1 and "AssertionError: -1" in failing.stderr
    assert patched.exit_code == 0 and patched.stdout.splitlines() == ["Done!", "M calc.py"]
    assert passing.exit_code == 0 and passing.stdout == "tests pass\n"
    assert shown.stdout == "run\nrun\ndef add(a, b):\n    return a + b\n", "each test command ran once"
    assert len({c.call_id for c in result.evidence.commands}) == 4
    events = list(JsonlEventSink(config.events_dir).read(handle.id))
    [created] = [e.data for e in events if e.type is EventType.SANDBOX_CREATED]
    assert (created["backend"], created["isolation"], created["trusted_only"]) == ("docker", "docker", False)
    # The container made before the kill ran every command, and is gone at completion.
    assert {c.sandbox_id for c in result.evidence.commands} == {created["sandbox_id"], container_name}
    assert containers_of(handle.id) == []
    assert not [e for e in events if e.type is EventType.SANDBOX_LOST]
    execs = [e.data for e in events if e.type is EventType.SANDBOX_EXEC]
    assert [e["exit_code"] for e in execs] == [1, 0, 0, 0]
    [approval] = result.evidence.approvals
    assert approval.request_id == request.request_id and approval.principal == "lead"
    await assert_replays(env.client, handle.id)
