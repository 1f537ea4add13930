"""The in-sandbox patch applier stays inside the work dir even through symlinks that an earlier
command made: a link to a file or a directory outside, an intermediate directory link, a dangling
link; a delete of a link removes the link only. Checked on the applier itself, then where it really
runs: in a process-tier (bubblewrap) sandbox and in a real Docker sandbox, with the earlier command
making the link in the same sandbox."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from agent_worker.activities.agent.sandbox_agents import APPLY_PATCH_SOURCE
from agent_worker.activities.artifacts import LocalArtifactStore
from agent_worker.activities.sandbox import ProcessSandbox, SandboxActivities
from agent_worker.activities.sandbox.apply_patch import main as apply_patch
from agent_worker.activities.sandbox.docker import DockerSandbox
from agent_worker.schemas.actions import SandboxCommand
from agent_worker.schemas.sandbox import (
    CommandRecord,
    CreateSandboxInput,
    DestroySandboxInput,
    ExecInput,
    SandboxBackend,
    SandboxRef,
    SandboxSpec,
)

from agent_worker.worker import build_sandboxes
from tests.helpers.support import make_config


def _patch(*ops: str) -> str:
    return "*** Begin Patch\n" + "".join(ops) + "*** End Patch\n"


ADD_THROUGH_FILE_LINK = _patch("*** Add File: link.txt\n+pwned\n")
ADD_THROUGH_DIR_LINK = _patch("*** Add File: dirlink/planted.txt\n+pwned\n")
ADD_THROUGH_DANGLING = _patch("*** Add File: dangling.txt\n+pwned\n")
UPDATE_THROUGH_LINK = _patch("*** Update File: link.txt\n@@\n-outside\n+pwned\n")
DELETE_THROUGH_DIR_LINK = _patch("*** Delete File: dirlink/victim.txt\n")
MOVE_THROUGH_DIR_LINK = _patch("*** Update File: mine.txt\n*** Move to: dirlink/moved.txt\n")


def _plant(work: Path, outside: Path) -> None:
    """What an earlier command could make: links from the work dir to ``outside``."""
    (outside / "victim.txt").write_text("outside\n")
    (work / "mine.txt").write_text("mine\n")
    (work / "link.txt").symlink_to(outside / "victim.txt")
    (work / "dirlink").symlink_to(outside)
    (work / "dangling.txt").symlink_to(outside / "new.txt")


@pytest.mark.parametrize(
    "patch",
    [
        ADD_THROUGH_FILE_LINK,
        ADD_THROUGH_DIR_LINK,
        ADD_THROUGH_DANGLING,
        UPDATE_THROUGH_LINK,
        DELETE_THROUGH_DIR_LINK,
        MOVE_THROUGH_DIR_LINK,
    ],
)
def test_a_patch_through_a_symlink_out_of_the_work_dir_is_refused_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], patch: str
) -> None:
    """Every way a symlink could carry a write or delete outside is refused with exit 1, and the
    outside directory is exactly as it was."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    _plant(work, outside)
    assert apply_patch(patch, str(work)) == 1
    assert "outside the work dir" in capsys.readouterr().err
    assert {p.name: p.read_text() for p in outside.iterdir()} == {"victim.txt": "outside\n"}
    assert (work / "mine.txt").read_text() == "mine\n"


def test_deleting_a_link_to_outside_removes_the_link_only(tmp_path: Path) -> None:
    """``Delete File`` of a symlink (to a file outside, or dangling) removes the link, never its target."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    _plant(work, outside)
    patch = _patch("*** Delete File: link.txt\n", "*** Delete File: dangling.txt\n")
    assert apply_patch(patch, str(work)) == 0
    assert not (work / "link.txt").is_symlink() and not (work / "dangling.txt").is_symlink()
    assert (outside / "victim.txt").read_text() == "outside\n"


def test_links_that_stay_inside_still_work(tmp_path: Path) -> None:
    """A symlink to a file or directory inside the work dir is followed as before."""
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / "a.txt").write_text("old\n")
    (work / "alias").symlink_to(work / "src")
    (work / "a-link.txt").symlink_to("src/a.txt")
    patch = _patch("*** Update File: a-link.txt\n@@\n-old\n+new\n", "*** Add File: alias/b.txt\n+b\n")
    assert apply_patch(patch, str(work)) == 0
    assert (work / "src" / "a.txt").read_text() == "new\n"
    assert (work / "src" / "b.txt").read_text() == "b\n"
    assert (work / "a-link.txt").is_symlink()


# ---- where the applier runs: in the sandbox ----------------------------------------------------


class Box:
    """One sandbox; ``sh`` runs a script in it, ``patch`` runs the applier as the tool plans it."""

    def __init__(self, acts: SandboxActivities, ref: SandboxRef, spec: SandboxSpec, task_id: str) -> None:
        self.acts, self.ref, self.spec, self.task_id = acts, ref, spec, task_id

    async def run(self, command: SandboxCommand) -> CommandRecord:
        return await self.acts.exec(
            ExecInput(
                task_id=self.task_id,
                call_id=f"c-{uuid.uuid4().hex[:8]}",
                sandbox=self.ref,
                spec=self.spec,
                command=command,
            )
        )

    async def sh(self, script: str) -> CommandRecord:
        return await self.run(SandboxCommand(argv=["sh", "-c", script], timeout_seconds=60))

    async def patch(self, patch: str) -> CommandRecord:
        return await self.run(SandboxCommand(argv=["python3", "-c", APPLY_PATCH_SOURCE], stdin=patch))


async def _box(acts: SandboxActivities, spec: SandboxSpec) -> Box:
    task_id = f"patch-containment-{uuid.uuid4().hex[:8]}"
    ref = await acts.create(CreateSandboxInput(task_id=task_id, tenant="t", spec=spec))
    return Box(acts, ref, spec, task_id)


@pytest.fixture
async def docker_box(docker_image: str, tmp_path: Path) -> AsyncIterator[Box]:
    store = LocalArtifactStore(tmp_path / "artifacts")
    acts = SandboxActivities(
        {SandboxBackend.DOCKER: DockerSandbox(docker_image)}, store, SandboxBackend.DOCKER
    )
    box = await _box(acts, SandboxSpec(backend=SandboxBackend.DOCKER))
    yield box
    await acts.destroy(DestroySandboxInput(task_id=box.task_id, sandbox=box.ref))


async def test_docker_tier_refuses_a_patch_through_a_link_an_earlier_command_made(docker_box: Box) -> None:
    """In a real container: a command links the work dir to /tmp; patches that would write, update or
    delete there through the link exit 1 and /tmp is unchanged; deleting the link removes the link."""
    made = await docker_box.sh(
        "mkdir -p /tmp/outside && echo outside > /tmp/outside/victim.txt && echo mine > mine.txt && "
        "ln -s /tmp/outside/victim.txt link.txt && ln -s /tmp/outside dirlink && "
        "ln -s /tmp/outside/new.txt dangling.txt"
    )
    assert made.exit_code == 0, made.stderr
    for patch in (ADD_THROUGH_DIR_LINK, ADD_THROUGH_FILE_LINK, ADD_THROUGH_DANGLING, UPDATE_THROUGH_LINK):
        refused = await docker_box.patch(patch)
        assert refused.exit_code == 1 and "outside the work dir" in refused.stderr, refused
    refused = await docker_box.patch(DELETE_THROUGH_DIR_LINK)
    assert refused.exit_code == 1 and "outside the work dir" in refused.stderr
    deleted = await docker_box.patch(_patch("*** Delete File: link.txt\n"))
    assert deleted.exit_code == 0, deleted.stderr
    after = await docker_box.sh("ls -A /tmp/outside; cat /tmp/outside/victim.txt; ls -A")
    assert after.stdout.split() == ["victim.txt", "outside", "dangling.txt", "dirlink", "mine.txt"]


async def test_process_tier_refuses_a_patch_through_a_link_an_earlier_command_made(tmp_path: Path) -> None:
    """In a bubblewrap sandbox: a command links the work dir to /tmp and to the sandbox's own parent;
    patches through the links exit 1, and nothing appears beside the work dir on the host."""
    backends, default, _ = build_sandboxes(make_config(tmp_path / "data", sandbox_backend="process"))
    sandbox = backends[SandboxBackend.PROCESS]
    assert isinstance(sandbox, ProcessSandbox) and sandbox.isolation == "bwrap"
    acts = SandboxActivities(backends, LocalArtifactStore(tmp_path / "artifacts"), default)
    box = await _box(acts, SandboxSpec())
    made = await box.sh("ln -s /tmp dirlink && ln -s /tmp/new.txt dangling.txt && ln -s /etc/passwd link.txt")
    assert made.exit_code == 0, made.stderr
    for patch in (ADD_THROUGH_DIR_LINK, ADD_THROUGH_DANGLING, ADD_THROUGH_FILE_LINK):
        refused = await box.patch(patch)
        assert refused.exit_code == 1 and "outside the work dir" in refused.stderr, refused
    inside = await box.patch(_patch("*** Add File: real/ok.txt\n+fine\n"))
    assert inside.exit_code == 0, inside.stderr
    work = sandbox.root / box.ref.sandbox_id / "work"
    assert (work / "real" / "ok.txt").read_text() == "fine\n"
    assert sorted(p.name for p in work.parent.iterdir()) == ["labels.json", "work"]
