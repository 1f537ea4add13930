"""Payload encryption on a real dev server: what the server stores, key rotation, refusals, and the
codec server the Temporal UI and CLI decode through."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from agent_worker.cli.devserver import temporal_binary
from agent_worker.schemas.payloads import DATA_CONVERTER
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.security.codec import (
    DecryptionError,
    EncryptionCodec,
    KeySpecError,
    data_converter,
    new_key,
    parse_keys,
)
from agent_worker.security.codec_server import CodecServer
from agent_worker.workflows import AgentTaskWorkflow
from google.protobuf import json_format
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter
from temporalio.worker import Replayer

from tests.helpers.support import REPO, TaskEnv, example_spec, running_worker, spawn_worker

EXPECTED_TOTAL = "9633.99"
# Indexed by the server, so never encoded.
UNENCODED_FIELDS = {"search_attributes"}
# The SDK core writes two things itself, bypassing the codec: `workflow.patched` markers (the patch id)
# and the bookkeeping of local activity markers (seq, attempt, activity id and type, times). Those are
# the only other plaintext payloads; a local activity's result is encrypted like any other.
PATCH_MARKER = "core_patch"
LOCAL_ACTIVITY_MARKER = "core_local_activity"
KEY_A = base64.b64decode(new_key())
KEY_B = base64.b64decode(new_key())
TOKEN = "codec-token-" + uuid.uuid4().hex
UI_ORIGIN = "http://localhost:8233"


def canary_spec(canary: str) -> dict[str, Any]:
    """The monthly-report example with the canary in its prompt and in an extra inline input file."""
    spec = example_spec()
    spec["prompt"] += f" Internal reference: {canary}."
    spec["inputs"].append({"name": "notes.txt", "content": f"Confidential note: {canary}\n"})
    return spec


async def connect_with(address: str, converter: DataConverter) -> Client:
    return await Client.connect(address, data_converter=converter)


async def approve_to_completion(env: TaskEnv, handle: WorkflowHandle[Any, TaskResult]) -> TaskResult:
    await env.approve(handle)
    return await asyncio.wait_for(handle.result(), 60)


def payloads_in(message: Message, skip: set[str] = UNENCODED_FIELDS) -> Iterator[Payload]:
    """Every ``Payload`` anywhere inside a proto message, outside the ``skip`` fields."""
    if isinstance(message, Payload):
        yield message
        return
    for field, value in message.ListFields():
        if field.type != field.TYPE_MESSAGE or field.name in skip:
            continue
        if field.message_type.GetOptions().map_entry:
            values = list(value.values())
        else:
            values = list(value) if field.is_repeated else [value]
        for item in values:
            if isinstance(item, Message):
                yield from payloads_in(item, skip)


async def history_of(client: Client, workflow_id: str) -> tuple[bytes, list[Payload]]:
    """The history as the server returns it: its raw bytes, and its payloads (patch markers aside)."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    raw = b"".join(event.SerializeToString() for event in history.events)
    payloads = []
    for event in history.events:
        marker = event.marker_recorded_event_attributes
        if marker.marker_name == PATCH_MARKER:
            continue
        if marker.marker_name == LOCAL_ACTIVITY_MARKER:
            assert marker.details["result"].payloads, "a local activity marker without its result"
            payloads += marker.details["result"].payloads
            continue
        payloads += payloads_in(event)
    return raw, payloads


def key_ids(payloads: list[Payload]) -> set[str]:
    return {p.metadata["encryption-key-id"].decode() for p in payloads if "encryption-key-id" in p.metadata}


@pytest.mark.parametrize("encrypted", [True, False], ids=["codec-on", "codec-off"])
async def test_canary_never_reaches_the_server_with_the_codec_on(
    config_env: TaskEnv, encrypted: bool
) -> None:
    """With the codec on, a secret in the prompt and in an inline input file is nowhere in the history
    the server stores, while the task still runs to completion through an approval and replays; with
    it off, the same secret is there in plain text."""
    canary = f"canary-{uuid.uuid4().hex}"
    converter = data_converter({"A": KEY_A}, "A") if encrypted else DATA_CONVERTER
    client = await connect_with(config_env.address, converter)
    env = TaskEnv(client=client, config=config_env.config, address=config_env.address)
    async with running_worker(client, env.config):
        handle = await env.start(canary_spec(canary))
        result = await approve_to_completion(env, handle)

    assert result.phase is TaskPhase.COMPLETED
    assert result.final_output and EXPECTED_TOTAL in result.final_output
    assert {a.name for a in result.evidence.inputs} >= {"notes.txt"}
    raw, payloads = await history_of(client, handle.id)
    assert len(payloads) > 10  # inputs, activity results, the update, the workflow result
    if encrypted:
        assert canary.encode() not in raw
        assert [p for p in payloads if p.metadata["encoding"] != b"binary/encrypted"] == []
        assert key_ids(payloads) == {"A"}
        history = await handle.fetch_history()
        await Replayer(workflows=[AgentTaskWorkflow], data_converter=converter).replay_workflow(history)
    else:
        assert canary.encode() in raw
        assert key_ids(payloads) == set()


async def test_payloads_written_under_an_old_key_decode_after_rotation(config_env: TaskEnv) -> None:
    """A task started while key A was current finishes on workers whose current key is B (keys A and B):
    the start input stays under A, everything written afterwards is under B."""
    address = config_env.address
    old = await connect_with(address, data_converter({"A": KEY_A}, "A"))
    # One run (its wait stays in it), so its start input is the one the old client wrote.
    spec = {**canary_spec("rot"), "continue_as_new_before_wait": 0}
    handle = await TaskEnv(client=old, config=config_env.config, address=address).start(spec)

    rotated = await connect_with(address, data_converter({"A": KEY_A, "B": KEY_B}, "B"))
    env = TaskEnv(client=rotated, config=config_env.config, address=address)
    async with running_worker(rotated, env.config):
        result = await approve_to_completion(
            env, rotated.get_workflow_handle(handle.id, result_type=TaskResult)
        )

    assert result.phase is TaskPhase.COMPLETED
    history = await rotated.get_workflow_handle(handle.id).fetch_history()
    [start_input] = history.events[0].workflow_execution_started_event_attributes.input.payloads
    assert key_ids([start_input]) == {"A"}
    _, payloads = await history_of(rotated, handle.id)
    assert key_ids(payloads) == {"A", "B"}
    assert key_ids(payloads[1:]) == {"B"}


async def test_unknown_key_id_and_tampered_ciphertext_fail_clearly() -> None:
    """Decoding refuses a payload under a key id it lacks and a payload whose ciphertext was altered,
    each with an error naming the key id, instead of returning anything."""
    written = data_converter({"A": KEY_A}, "A")
    [payload] = await written.encode([{"secret": "s3cret"}])

    with pytest.raises(DecryptionError, match="key id 'A', which this codec does not have") as unknown:
        await data_converter({"B": KEY_B}, "B").decode([payload])
    assert unknown.value.key_id == "A"

    tampered = Payload()
    tampered.CopyFrom(payload)
    tampered.data = payload.data[:-1] + bytes([payload.data[-1] ^ 1])
    with pytest.raises(DecryptionError, match="key id 'A' failed authentication"):
        await written.decode([tampered])

    # The same key id bound to a different key fails authentication too: never garbage.
    with pytest.raises(DecryptionError, match="key id 'A' failed authentication"):
        await data_converter({"A": KEY_B}, "A").decode([payload])
    # Plaintext payloads (e.g. from a client without the codec) pass through.
    [plain] = await pydantic_data_converter.encode([{"x": 1}])
    assert await written.decode([plain], [dict]) == [{"x": 1}]
    assert await written.decode([payload], [dict]) == [{"secret": "s3cret"}]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "no encryption keys given"),
        ("A", "entry 1: expected 'KEY_ID:BASE64KEY'"),
        (f"A:{new_key()},{new_key()}", "entry 2: expected 'KEY_ID:BASE64KEY'"),
        (f"A:{new_key()},A:{new_key()}", r"entry 2 \('A'\): key id repeated"),
        ("A:not base64!", r"entry 1 \('A'\): key is not valid base64"),
        (f"A:{base64.b64encode(b'x' * 16).decode()}", r"entry 1 \('A'\): key is 16 bytes, AES-256 needs 32"),
        (f"bad id:{new_key()}", r"entry 1 \('bad id'\): key ids are"),
    ],
)
def test_key_lists_are_checked_without_echoing_keys(spec: str, message: str) -> None:
    """A malformed ``AGENT_WORKER_ENCRYPTION_KEYS`` entry is named by position and key id, and the
    error never contains key material."""
    with pytest.raises(KeySpecError, match=message) as err:
        parse_keys(spec)
    for entry in spec.split(","):
        secret = entry.rpartition(":")[2]
        if len(secret) > 8:
            assert secret not in str(err.value)


def test_converter_settings_that_would_silently_store_plaintext_are_refused() -> None:
    """A key id without keys, several keys without a current one, or a current id that is not among the
    keys are errors; no keys means the plain pydantic converter, one key needs no id."""
    with pytest.raises(KeySpecError, match="key id 'A' given, but no encryption keys"):
        data_converter(None, "A")
    with pytest.raises(KeySpecError, match="several encryption keys"):
        data_converter({"A": KEY_A, "B": KEY_B}, None)
    with pytest.raises(KeySpecError, match="'C' is not among the keys"):
        data_converter({"A": KEY_A}, "C")
    assert data_converter(None, None) is DATA_CONVERTER  # plain: the compact pydantic JSON (schemas.payloads)
    codec = data_converter(parse_keys(f"A:{base64.b64encode(KEY_A).decode()}"), None).payload_codec
    assert isinstance(codec, EncryptionCodec) and codec.current == "A"


def post(url: str, body: Mapping[str, Any], headers: Mapping[str, str] = {}) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **headers}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def preflight(base_url: str, origin: str) -> Mapping[str, str]:
    """The headers of a CORS preflight for ``POST /decode`` from ``origin``."""
    request = urllib.request.Request(
        f"{base_url}/decode",
        method="OPTIONS",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type,x-namespace",
        },
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 204
        return dict(response.headers)


def temporal_show(address: str, workflow_id: str, *codec_args: str) -> subprocess.CompletedProcess[str]:
    """`temporal workflow show -o json` (its payloads in proto JSON: data base64)."""
    return subprocess.run(
        [temporal_binary(), "workflow", "show", "--address", address, "-w", workflow_id, "-o", "json",
         *codec_args],
        capture_output=True,
        text=True,
        timeout=30,
    )  # fmt: skip


def shown_payload_data(output: str) -> bytes:
    """The data of every payload in `temporal workflow show -o json` output, base64-decoded."""
    found: list[bytes] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if set(node) <= {"metadata", "data"} and "metadata" in node:
                found.append(base64.b64decode(node.get("data", "")))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(output))
    return b"\n".join(found)


async def test_codec_server_decodes_for_token_holders_only(config_env: TaskEnv) -> None:
    """The codec server decodes a payload fetched from the server's history for a client with the
    token, refuses one without it (401), and lets `temporal workflow show --codec-endpoint` show the
    decrypted canary."""
    canary = f"canary-{uuid.uuid4().hex}"
    converter = data_converter({"A": KEY_A}, "A")
    client = await connect_with(config_env.address, converter)
    env = TaskEnv(client=client, config=config_env.config, address=config_env.address)
    handle = await env.start(canary_spec(canary))  # no worker: the start event is enough
    try:
        history = await handle.fetch_history()
        [encrypted] = history.events[0].workflow_execution_started_event_attributes.input.payloads
        body = {"payloads": [json_format.MessageToDict(encrypted)]}
        assert converter.payload_codec is not None
        codec = converter.payload_codec
        with CodecServer(codec, host="127.0.0.1", port=0, token=TOKEN, ui_origin=UI_ORIGIN) as server:
            status, decoded = post(
                f"{server.url}/default/decode",
                body,
                {"Authorization": f"Bearer {TOKEN}", "X-Namespace": "default"},
            )
            assert status == 200
            [plain] = decoded["payloads"]
            assert base64.b64decode(plain["metadata"]["encoding"]) == b"json/plain"
            task_input = json.loads(base64.b64decode(plain["data"]))
            assert canary in task_input["spec"]["prompt"]

            assert post(f"{server.url}/decode", body)[0] == 401
            assert post(f"{server.url}/decode", body, {"Authorization": "Bearer wrong"})[0] == 401
            # The browser's preflight (no credentials) is answered for the UI's origin only.
            assert preflight(server.url, UI_ORIGIN)["Access-Control-Allow-Origin"] == UI_ORIGIN
            assert preflight(server.url, "https://evil.example").get("Access-Control-Allow-Origin") is None

            shown = await asyncio.to_thread(
                temporal_show,
                env.address,
                handle.id,
                "--codec-endpoint",
                server.url + "/{namespace}",
                "--codec-auth",
                f"Bearer {TOKEN}",
            )
            assert shown.returncode == 0, shown.stderr
            assert canary.encode() in shown_payload_data(shown.stdout)
        # Without the codec server the CLI sees only ciphertext.
        raw = await asyncio.to_thread(temporal_show, env.address, handle.id)
        assert raw.returncode == 0, raw.stderr
        assert b"Confidential note" not in shown_payload_data(raw.stdout)
        assert canary not in raw.stdout
    finally:
        await handle.terminate("test over")


async def test_worker_and_cli_encrypt_when_keys_are_configured(config_env: TaskEnv, tmp_path: Path) -> None:
    """Configured only by environment: a worker process and the `agent-worker` CLI with
    ``AGENT_WORKER_ENCRYPTION_KEYS`` run a task through its approval while the server stores ciphertext
    only; a CLI without the keys cannot read the task's input."""
    canary = f"canary-{uuid.uuid4().hex}"
    keys = f"k1:{base64.b64encode(KEY_A).decode()},k2:{base64.b64encode(KEY_B).decode()}"
    crypto_env = {"AGENT_WORKER_ENCRYPTION_KEYS": keys, "AGENT_WORKER_ENCRYPTION_KEY_ID": "k2"}
    spec_file = tmp_path / "task.json"
    spec_file.write_text(json.dumps(canary_spec(canary)))
    cli_env = {**config_env.worker_env(), **crypto_env}

    def cli(*args: str, env: Mapping[str, str] = cli_env) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "agent_worker.cli.main", "--address", config_env.address, *args]
        return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)

    worker = spawn_worker(config_env, tmp_path / "worker.log", **crypto_env)
    try:
        task_id = f"enc-{uuid.uuid4().hex[:8]}"
        started = await asyncio.to_thread(
            cli, "start", str(spec_file), "--id", task_id, "--task-queue", config_env.task_queue
        )
        assert started.returncode == 0, started.stderr
        client = await connect_with(config_env.address, data_converter({"k1": KEY_A, "k2": KEY_B}, "k2"))
        env = TaskEnv(client=client, config=config_env.config, address=config_env.address)
        handle = client.get_workflow_handle(task_id, result_type=TaskResult)
        [request] = (await env.awaiting_approval(handle)).pending
        approved = await asyncio.to_thread(
            cli, "approve", task_id, "--request", request.request_id, "--version", request.version,
            "--as", "finance-lead",
        )  # fmt: skip
        assert approved.returncode == 0, approved.stderr
        result = await asyncio.wait_for(handle.result(), 90)
        # Without the keys the CLI gets ciphertext it cannot decode, and says so instead of printing it.
        plain_env = {k: v for k, v in cli_env.items() if not k.startswith("AGENT_WORKER_ENCRYPTION")}
        blind = await asyncio.to_thread(cli, "status", task_id, env=plain_env)
    finally:
        worker.terminate()
        worker.wait(30)

    assert result.phase is TaskPhase.COMPLETED
    raw, payloads = await history_of(client, task_id)
    assert canary.encode() not in raw
    assert key_ids(payloads) == {"k2"}
    assert blind.returncode == 2
    assert "payloads are encrypted; set AGENT_WORKER_ENCRYPTION_KEYS" in blind.stderr
    assert canary not in blind.stdout + blind.stderr


def test_codec_server_without_a_token_answers_only_requests_addressed_to_loopback() -> None:
    """Without a token, a request whose Host is another name (a DNS-rebinding page re-pointed at
    127.0.0.1) or missing is refused with 421 before anything is decoded, its preflight too;
    localhost and loopback addresses are answered; with a token, the Host does not matter."""
    import http.client

    codec = data_converter({"A": KEY_A}, "A").payload_codec
    assert codec is not None
    canary = f"canary-{uuid.uuid4().hex}"
    plain = Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(canary).encode())
    [encrypted] = asyncio.run(codec.encode([plain]))
    body = {"payloads": [json_format.MessageToDict(encrypted)]}
    with CodecServer(codec, host="127.0.0.1", port=0) as server:
        port = server.port
        for host in (
            "evil.example",
            f"evil.example:{port}",
            f"127.0.0.1.nip.io:{port}",
            "localhost.evil.example",
        ):
            status, answer = post(f"{server.url}/decode", body, {"Host": host})
            assert status == 421, host
            assert canary not in json.dumps(answer)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(
                urllib.request.Request(
                    f"{server.url}/decode",
                    method="OPTIONS",
                    headers={"Host": f"evil.example:{port}", "Origin": "http://evil.example"},
                ),
                timeout=10,
            )
        assert refused.value.code == 421
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.putrequest("POST", "/decode", skip_host=True)
        data = json.dumps(body).encode()
        connection.putheader("Content-Length", str(len(data)))
        connection.endheaders(data)
        assert connection.getresponse().status == 421
        connection.close()
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}", "127.0.0.1"):
            status, answer = post(f"{server.url}/decode", body, {"Host": host})
            assert status == 200, host
            assert json.loads(base64.b64decode(answer["payloads"][0]["data"])) == canary
    with CodecServer(codec, host="127.0.0.1", port=0, token=TOKEN) as server:
        named = {"Host": "codec.internal.example", "Authorization": f"Bearer {TOKEN}"}
        status, answer = post(f"{server.url}/decode", body, named)
        assert status == 200
        assert json.loads(base64.b64decode(answer["payloads"][0]["data"])) == canary
