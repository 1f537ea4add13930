"""The MCP-over-HTTP example of docs/mcp.md, run as a user would: the example server
(`python -m agent_worker.examples.mcp_notes.http_server`, the official `mcp` SDK 2.x's `MCPServer` over
Streamable HTTP) on a loopback port, and the doc's agent block, as written, in its own process
against it (a real embedded Temporal server and worker, the scripted model)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import mcp.server.mcpserver
from agent_worker.cli.devserver import free_port, port_open, stop_process_group

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "mcp.md"
BLOCK = re.compile(r"^```python mcp-http\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def test_the_docs_say_the_mcp_sdk_major_version_that_is_installed() -> None:
    """docs/mcp.md names mcp 2.x and `MCPServer`, which is what the installed SDK is and exports;
    1.x's `FastMCP` module is gone, as the page says."""
    text = DOC.read_text()
    assert version("mcp").split(".")[0] == "2"
    assert mcp.server.mcpserver.MCPServer.__name__ == "MCPServer"
    assert "`mcp>=2,<3`" in text and "from mcp.server.mcpserver import MCPServer" in text
    done = subprocess.run(
        [sys.executable, "-c", "import mcp.server.fastmcp"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0 and "ModuleNotFoundError" in done.stderr


def test_the_http_example_server_serves_the_docs_agent_which_completes_and_writes_one_note(
    tmp_path: Path,
) -> None:
    """The example server on a free loopback port and the doc's block pointed at it: the task
    completes, its search ran inside the turn, its approved note was added once, under the task's
    operation key, in the server's notes file."""
    port = free_port()
    notes = tmp_path / "notes.json"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent_worker.examples.mcp_notes.http_server",
            "--port",
            str(port),
            "--notes",
            str(notes),
        ],
        cwd=REPO,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not port_open("127.0.0.1", port):
            assert server.poll() is None, "the example MCP server exited"
            assert time.monotonic() < deadline, "the example MCP server did not listen"
            time.sleep(0.1)
        [block] = BLOCK.findall(DOC.read_text())
        script = tmp_path / "mcp_http_example.py"
        script.write_text(block)
        env = {**os.environ, "PYTHONPATH": str(REPO), "NOTES_MCP_URL": f"http://127.0.0.1:{port}/mcp"}
        for name in ("TEMPORAL_ADDRESS", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
            env.pop(name, None)
        done = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
        )
    finally:
        stop_process_group(server, grace=5)
    assert done.returncode == 0, done.stderr[-4000:]
    phase, search, note = done.stdout.strip().split(" - ")
    assert (phase, search) == ("completed", "search_notes")
    tool, key = note.split()
    assert tool == "add_note"
    added = json.loads(notes.read_text())
    assert added[key] == {"id": 2, "text": "Toner ordered."}  # after the seed note, once
