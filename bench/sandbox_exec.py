"""``sandbox.exec`` against raw ``docker exec``, in the same run on the same container.

Three ways to run ``true`` in a warm container, each timed over ``--rounds`` round trips:

- ``docker exec`` (the CLI): the baseline a person would compare with;
- the docker SDK's ``exec_run``: the floor for any Python caller;
- ``sandbox.exec``: our activity body (exec with kill wrapper and OOM check, output capped and stored
  as artifacts, the command record built), without Temporal around it.

Then the cost of a container per command (create, start, exec, remove) against one per task.

Run: ``python -m bench.sandbox_exec [--rounds 30]``. Writes ``bench/results/sandbox_exec.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import docker
from agent_worker.activities.artifacts import LocalArtifactStore
from agent_worker.activities.sandbox import SandboxActivities
from agent_worker.activities.sandbox.docker import DockerSandbox
from agent_worker.schemas.actions import SandboxCommand
from agent_worker.schemas.config import WorkerConfig
from agent_worker.schemas.sandbox import (
    CreateSandboxInput,
    DestroySandboxInput,
    ExecInput,
    SandboxBackend,
    SandboxSpec,
)

RESULTS = Path(__file__).parent / "results" / "sandbox_exec.md"


async def timed(rounds: int, step: Callable[[], Awaitable[object]]) -> list[float]:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        await step()
        times.append((time.perf_counter() - started) * 1000)
    return times


async def main(rounds: int) -> str:
    image = WorkerConfig().docker_image
    client = docker.from_env()
    with tempfile.TemporaryDirectory() as tmp:
        acts = SandboxActivities(
            {SandboxBackend.DOCKER: DockerSandbox(image)},
            LocalArtifactStore(Path(tmp)),
            SandboxBackend.DOCKER,
        )
        spec = SandboxSpec(backend=SandboxBackend.DOCKER)
        task_id = f"bench-{uuid.uuid4().hex[:8]}"
        ref = await acts.create(CreateSandboxInput(task_id=task_id, tenant="bench", spec=spec))
        container = client.containers.get(ref.provider_id)
        command = SandboxCommand(argv=["true"])

        async def cli() -> None:
            await asyncio.to_thread(subprocess.run, ["docker", "exec", ref.provider_id, "true"], check=True)

        async def sdk() -> None:
            await asyncio.to_thread(container.exec_run, ["true"])

        async def ours() -> None:
            await acts.exec(
                ExecInput(task_id=task_id, call_id=uuid.uuid4().hex, sandbox=ref, spec=spec, command=command)
            )

        async def container_per_command() -> None:
            one = await asyncio.to_thread(
                client.containers.run, image, ["true"], detach=True, network_mode="none", read_only=True
            )
            await asyncio.to_thread(one.wait)
            await asyncio.to_thread(one.remove, force=True)

        try:
            for warm in (cli, sdk, ours):  # warm caches before measuring
                await warm()
            results = {
                "docker exec (CLI)": await timed(rounds, cli),
                "docker SDK exec_run": await timed(rounds, sdk),
                "sandbox.exec (ours)": await timed(rounds, ours),
                "container per command": await timed(max(3, rounds // 5), container_per_command),
            }
        finally:
            await acts.destroy(DestroySandboxInput(task_id=task_id, sandbox=ref))
    baseline = statistics.median(results["docker exec (CLI)"])
    lines = [
        "# sandbox.exec vs raw docker exec",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.node()} ({platform.machine()}, "
        f"{platform.python_version()}), image `{image}`, {rounds} round trips each, one warm container.",
        "Command: `python -m bench.sandbox_exec`. Ratios are against `docker exec` measured in the same run.",
        "",
        "| way | median ms | p95 ms | ratio to docker exec |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, times in results.items():
        median = statistics.median(times)
        p95 = sorted(times)[max(0, int(len(times) * 0.95) - 1)]
        lines.append(f"| {name} | {median:.1f} | {p95:.1f} | {median / baseline:.2f}x |")
    lines += [
        "",
        "`sandbox.exec` does more than a bare exec: a kill wrapper (so a timeout or cancel kills the whole",
        "process group inside the container), output capped and stored as content-addressed artifacts,",
        "and the command record. One container per task is what the tier does; the last row shows what",
        "a container per command would cost instead.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    report = asyncio.run(main(parser.parse_args().rounds))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(report)
    print(report)
