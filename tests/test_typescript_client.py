"""The TypeScript client (clients/typescript, docs/typescript-client.md): its types are what the API's
OpenAPI document generates, it builds with `tsc`, its event follower resumes and closes as it says
(`node --test` against a scripted server), and the doc's example, run as written in Node, drives a
task through one approval to completion against the real dev server, a worker and the API."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from types import ModuleType

import pytest
from agent_worker.activities.events import JsonlEventSink
from agent_worker.api import ApiConfig, build_api
from agent_worker.inbox.auth import Authenticator
from agent_worker.inbox.serve import serving
from agent_worker.schemas.tasks import TaskPhase
from temporalio.client import WorkflowExecutionStatus

from agent_worker.client import AgentWorkerClient
from tests.helpers.support import REPO, TaskEnv, assert_replays

PACKAGE = REPO / "clients" / "typescript"
DOC = REPO / "docs" / "typescript-client.md"
BLOCK = re.compile(r"^```js tsclient\n(.*?)^```$", re.MULTILINE | re.DOTALL)
LEAD = "lead-0f3c9a7e51d2b8c4"
TOKENS = {LEAD: "finance-lead"}
NPM_SECONDS = 600
NODE_SECONDS = 300


def load_dumper() -> ModuleType:
    spec = importlib.util.spec_from_file_location("openapi_dump", REPO / "scripts" / "openapi.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def npm(*args: str) -> None:
    done = subprocess.run(
        ["npm", *args], cwd=PACKAGE, capture_output=True, text=True, timeout=NPM_SECONDS, check=False
    )
    assert done.returncode == 0, f"npm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="session")
def built() -> Path:
    """The package with its pinned npm packages installed (only when the lock file changed since:
    scripts/test-machine.sh did it already on a test machine) and built by `tsc` from its source now.
    Node and npm are Debian packages the test machine installs: never skipped."""
    assert shutil.which("node") and shutil.which("npm"), "node and npm: run scripts/test-machine.sh"
    installed = PACKAGE / "node_modules" / ".package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < (PACKAGE / "package-lock.json").stat().st_mtime:
        npm("ci", "--no-audit", "--no-fund", "--loglevel=error")
    npm("run", "--silent", "build")
    return PACKAGE / "dist"


def test_the_committed_openapi_document_is_the_one_the_api_serves() -> None:
    """clients/typescript/openapi.json is what build_api's /openapi.json answers now: a route changed
    without regenerating (`make ts-client`) fails here, and `scripts/openapi.py --check` says so."""
    dumper = load_dumper()
    committed = (PACKAGE / "openapi.json").read_text()
    assert committed == dumper.render(), "clients/typescript/openapi.json is stale: run make ts-client"
    assert dumper.main(["--check"]) == 0
    document = json.loads(committed)
    assert (
        "text/event-stream"
        in document["paths"]["/v1/tasks/{task_id}/events"]["get"]["responses"]["200"]["content"]
    )


def test_the_openapi_check_fails_on_a_stale_document(tmp_path: Path) -> None:
    """`scripts/openapi.py --check` exits 1 when the committed document lacks a route the API has,
    and 0 once it is rewritten."""
    dumper = load_dumper()
    document = json.loads(dumper.render())
    del document["paths"]["/v1/tasks/{task_id}/cancel"]
    dumper.OUTPUT = tmp_path / "openapi.json"
    dumper.OUTPUT.write_text(json.dumps(document, indent=2) + "\n")
    dumper.REPO = tmp_path
    assert dumper.main(["--check"]) == 1
    assert dumper.main([]) == 0 and dumper.main(["--check"]) == 0


def test_the_committed_types_are_what_openapi_typescript_generates(built: Path, tmp_path: Path) -> None:
    """src/schema.ts is exactly what the pinned openapi-typescript makes of the committed openapi.json
    (`npm run generate`): hand edits or a regenerated document without new types fail here."""
    fresh = tmp_path / "schema.ts"
    generator = PACKAGE / "node_modules" / ".bin" / "openapi-typescript"
    done = subprocess.run(
        [str(generator), "openapi.json", "--output", str(fresh)],
        cwd=PACKAGE, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (PACKAGE / "src" / "schema.ts").read_text() == fresh.read_text(), (
        "clients/typescript/src/schema.ts is stale: run make ts-client"
    )
    assert (built / "index.d.ts").exists() and (built / "schema.d.ts").exists()


def test_the_follower_resumes_after_cuts_and_closes_when_left(built: Path) -> None:
    """The package's own Node tests pass against the build: a stream closed early or reset is resumed
    with Last-Event-ID and nothing repeated, `after` resumes from the first request, a gap is
    reported, endless cuts give up after maxReconnects, error frames and HTTP errors throw (the
    latter without a retry), leaving the loop closes the connection, and wait() reads after the end."""
    done = subprocess.run(
        ["node", "--test", "--test-timeout=60000", "test/"],
        cwd=PACKAGE, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(r"^# pass 6$", done.stdout, re.MULTILINE), done.stdout[-2000:]
    assert re.search(r"^# fail 0$", done.stdout, re.MULTILINE), done.stdout[-2000:]


async def run_node(env: TaskEnv, tmp_path: Path, script: str, **variables: str) -> list[str]:
    """``script`` (an ES module importing ``@agent-worker/client``) run by Node from the repository's
    root, against the API (token auth, as ``finance-lead``) serving ``env``'s worker; its stdout
    lines, once it has exited 0."""
    path = tmp_path / "script.mjs"
    path.write_text(script)
    # What `npm install clients/typescript` gives an app: the package under its name.
    (tmp_path / "node_modules" / "@agent-worker").mkdir(parents=True)
    (tmp_path / "node_modules" / "@agent-worker" / "client").symlink_to(PACKAGE)
    config = ApiConfig(
        auth=Authenticator("token", TOKENS),
        task_queue=env.task_queue,
        stored_events=JsonlEventSink(env.config.events_dir).read_chain,
    )
    async with serving(build_api(env.client, config), "127.0.0.1:0") as url:
        node = await asyncio.create_subprocess_exec(
            "node", str(path), cwd=REPO,
            env={**os.environ, "AGENT_WORKER_API_URL": url, "AGENT_WORKER_API_TOKEN": LEAD, **variables},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            out, err = await asyncio.wait_for(node.communicate(), NODE_SECONDS)
        finally:
            if node.returncode is None:
                node.kill()
                await node.wait()
    assert node.returncode == 0, f"{out.decode()}\n{err.decode()}"
    return out.decode().splitlines()


async def test_the_docs_example_completes_a_task_with_one_approval(
    built: Path, env: TaskEnv, tmp_path: Path
) -> None:
    """The doc's example, as written, in Node against the API (token auth) serving a real worker:
    it starts the monthly report, follows its events until the approval request, approves it,
    follows on after the last event seen to the end, and reads the result. Every event arrives
    once and in order across the two connections; the task completed in Temporal with the approval
    by finance-lead in its evidence and the report written once."""
    [example] = BLOCK.findall(DOC.read_text())
    lines = await run_node(env, tmp_path, example)
    task_id = lines[0].removeprefix("started ")
    assert re.fullmatch(r"task-\S+", task_id), lines[0]
    events = [line.split() for line in lines if line.startswith("event ")]
    ids = [int(seq) for _, seq, _ in events]
    assert ids == list(range(1, len(ids) + 1)), ids  # once each, in order, across both connections
    kinds = [kind for _, _, kind in events]
    asked = lines.index(next(line for line in lines if line.startswith("asked ")))
    assert lines[asked - 1].endswith(" approval.requested")  # the first follow stopped there
    assert lines[asked].startswith("asked submit_report sha256:")
    assert lines[asked + 1] == "decided true"
    assert kinds.index("approval.requested") < kinds.index("approval.decided") < kinds.index("task.finished")
    assert lines[-2] == "end completed", lines
    assert lines[-1].startswith('result completed "') and len(lines[-1]) > len('result completed ""')

    result = await AgentWorkerClient(env.client, env.task_queue).result(task_id)
    assert result.phase is TaskPhase.COMPLETED
    [approval] = result.evidence.approvals
    decided = (approval.decision.value, approval.principal, approval.tool)
    assert decided == ("approve", "finance-lead", "submit_report")
    assert approval.reason == "figures checked"
    assert env.business().count() == 1
    await assert_replays(env.client, task_id)


async def test_the_client_sends_input_cancels_reads_and_throws_the_apis_errors(
    built: Path, env: TaskEnv, tmp_path: Path
) -> None:
    """From Node (tests/helpers/tsclient_input_cancel.mjs): a chosen id comes back scoped to its
    tenant and a second start of it starts nothing; input while the task awaits approval is added
    (by the caller, as the task's events say); cancel ends it `cancelled`, which the follower's end
    and the read (no result, the problem named) say and Temporal holds; a missing task (404), an
    invalid spec (422, naming the field) and a call without a token (401) throw AgentWorkerApiError
    with the API's status."""
    chosen = f"ts-{uuid.uuid4().hex[:8]}"
    script = (REPO / "tests" / "helpers" / "tsclient_input_cancel.mjs").read_text()
    steps = [json.loads(line) for line in await run_node(env, tmp_path, script, TASK_ID=chosen)]
    by_step = {s["step"]: s for s in steps if s["step"] != "error"}
    task_id = f"acme/{chosen}"
    assert by_step["start"]["first"] == {"task_id": task_id, "started": True}
    assert by_step["start"]["again"] == {"task_id": task_id, "started": False}
    assert by_step["input"]["answer"]["task_id"] == task_id
    assert by_step["cancel"]["answer"] == {"task_id": task_id, "cancel": "requested"}
    followed = by_step["followed"]
    ids = [e["id"] for e in followed["events"]]
    assert ids == list(range(followed["after"] + 1, followed["after"] + 1 + len(ids))), ids
    [added] = [e for e in followed["events"] if e["type"] == "input.added"]
    assert added["data"]["principal"] == "finance-lead" and added["data"]["chars"] == 25
    assert followed["events"][-1]["type"] == "task.finished"
    assert followed["end"] == {"kind": "end", "phase": "cancelled", "reason": "cancelled on request"}
    view = by_step["read"]["view"]
    assert (view["task_id"], view["running"], view["result"]) == (task_id, False, None)
    assert view["problem"] == "Workflow cancelled"
    errors = {s["name"]: s for s in steps if s["step"] == "error"}
    assert all(e["thrown"] for e in errors.values()), errors
    assert errors["missing"]["status"] == 404
    assert errors["invalid"]["status"] == 422 and "max_turns" in json.dumps(errors["invalid"]["detail"])
    assert errors["anonymous"]["status"] == 401

    handle = env.client.get_workflow_handle(task_id)
    assert (await handle.describe()).status is WorkflowExecutionStatus.CANCELED
    assert env.business().count() == 0
