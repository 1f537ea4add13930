"""The payloads of a step (``agent.turn``'s input and result, ``sandbox.exec``'s input and command
record) are written without their defaults and read back as the same values; what other programs
read (a task's input and result, its status, decisions, events) keeps every field."""

from __future__ import annotations

import base64
import importlib
import inspect
import json
import pkgutil
from pathlib import Path
from typing import Any

from agent_worker.schemas.events import Event
from agent_worker.schemas.payloads import DATA_CONVERTER, is_compact
from agent_worker.schemas.sandbox import CommandRecord, ExecInput
from agent_worker.schemas.tasks import TaskResult
from agent_worker.schemas.turns import TurnInput, TurnResult
from pydantic import BaseModel

from agent_worker import schemas
from tests.helpers.histories import chain_files

HISTORIES = Path(__file__).parent / "histories"
EXAMPLE = "test_approval_by_temporal_cli_completes_with_evidence.json"


def marked() -> set[str]:
    found = set()
    for module in pkgutil.iter_modules(schemas.__path__):
        for name, value in inspect.getmembers(
            importlib.import_module(f"agent_worker.schemas.{module.name}"), inspect.isclass
        ):
            if issubclass(value, BaseModel) and value.__dict__.get("compact_payload") is True:
                found.add(name)
    return found


def test_only_the_payloads_of_a_step_are_compact() -> None:
    """Exactly the four per-step activity payloads are marked; nothing a client reads is."""
    assert marked() == {"TurnInput", "TurnResult", "ExecInput", "CommandRecord"}


def payload(value: Any) -> tuple[dict[str, Any], Any]:
    converter = DATA_CONVERTER.payload_converter
    [encoded] = converter.to_payloads([value])
    [decoded] = converter.from_payloads([encoded], [type(value)])
    return json.loads(encoded.data), decoded


def history_payloads(path: Path, activity: str) -> list[dict[str, Any]]:
    """The decoded results of every ``activity`` the committed chain completes, run by run (event
    ids are a run's own)."""
    found = []
    for run in chain_files(path):
        events = json.loads(run.read_text())["events"]
        scheduled = {
            e["eventId"]
            for e in events
            if (a := e.get("activityTaskScheduledEventAttributes")) and a["activityType"]["name"] == activity
        }
        found += [
            json.loads(base64.b64decode(a["result"]["payloads"][0]["data"]))
            for e in events
            if (a := e.get("activityTaskCompletedEventAttributes")) and a["scheduledEventId"] in scheduled
        ]
    return found


def test_a_turn_result_from_the_example_reads_back_the_same_from_fewer_bytes() -> None:
    """The example's turn results, as the committed history holds them, leave their defaults out; each
    decodes to the value it had, which the whole form (the history from before) encodes to more bytes."""
    results = history_payloads(HISTORIES / EXAMPLE, "agent.turn")
    before = history_payloads(HISTORIES / "pre-local-delivery" / EXAMPLE, "agent.turn")
    assert len(results) == len(before) == 3
    for now, whole in zip(results, before, strict=True):
        assert "invalid" not in now and "tool_calls_dropped" not in now and "invalid" in whole
        value = TurnResult.model_validate(now)
        # What is left out is exactly what held its default in the whole form.
        left_out = set(whole) - set(now)
        full = value.model_dump(mode="json")
        assert left_out and all(whole[key] == full[key] for key in left_out), left_out
        written, decoded = payload(value)
        assert written == now and decoded == value
        assert len(json.dumps(written)) < len(json.dumps(value.model_dump(mode="json")))


def test_a_command_record_and_a_turn_input_round_trip_without_their_defaults() -> None:
    record = CommandRecord.model_validate(
        {
            "call_id": "call_1",
            "sandbox_id": "aw-1",
            "argv": ["sh", "-c", "echo 1"],
            "exit_code": 0,
            "duration_ms": 3,
            "stdout": "1\n",
            "stderr": "",
            "stdout_artifact": {"name": "call_1.stdout", "digest": "sha256:" + "a" * 64, "size": 2},
            "stderr_artifact": {"name": "call_1.stderr", "digest": "sha256:" + "b" * 64, "size": 0},
        }
    )
    turn = TurnInput(
        task_id="t-1", agent="a", turn=2, prompt="count to 3", conversation_ref="sha256:" + "c" * 64
    )
    for value, absent in ((record, {"timed_out", "outputs", "sandbox"}), (turn, {"inputs", "results"})):
        written, decoded = payload(value)
        assert decoded == value and not absent & set(written), written
        assert len(json.dumps(written)) < len(value.model_dump_json())


def recorded_payloads() -> list[tuple[type[BaseModel], dict[str, Any]]]:
    """Every turn input and result, command input and command record the committed histories hold
    (``agent.turn``, ``sandbox.exec`` and the local ``sandbox.exec_here``), with its model."""
    found: list[tuple[type[BaseModel], dict[str, Any]]] = []
    for path in sorted(HISTORIES.rglob("test_*.json")):
        events = json.loads(path.read_text())["events"]
        names = {}
        for e in events:
            if a := e.get("activityTaskScheduledEventAttributes"):
                names[e["eventId"]] = name = a["activityType"]["name"]
                model = {"agent.turn": TurnInput, "sandbox.exec": ExecInput}.get(name)
                if model and a.get("input"):
                    found.append((model, decoded(a["input"]["payloads"][0])))
            elif (a := e.get("activityTaskCompletedEventAttributes")) and a.get("result"):
                model = {"agent.turn": TurnResult, "sandbox.exec": CommandRecord}.get(
                    names[a["scheduledEventId"]]
                )
                if model:
                    found.append((model, decoded(a["result"]["payloads"][0])))
            elif (a := e.get("markerRecordedEventAttributes")) and a["markerName"] == "core_local_activity":
                kind = decoded(a["details"]["data"]["payloads"][0])["activity_type"]
                if kind == "sandbox.exec_here" and "result" in a["details"]:
                    found.append((CommandRecord, decoded(a["details"]["result"]["payloads"][0])))
    return found


def decoded(payload: dict[str, Any]) -> Any:
    return json.loads(base64.b64decode(payload["data"]))


def test_every_recorded_step_payload_reads_back_the_same_when_written_compact() -> None:
    """Over every such payload of every committed history (tags of operations, nested results,
    artifacts, usage included): written compact, it decodes to the value it held, in fewer bytes."""
    found = recorded_payloads()
    assert {model for model, _ in found} == {TurnInput, TurnResult, ExecInput, CommandRecord}
    assert len(found) > 300, len(found)
    saved = 0
    for model, raw in found:
        value = model.model_validate(raw)
        written, back = payload(value)
        assert back == value, (model.__name__, raw)
        saved += len(value.model_dump_json()) - len(json.dumps(written, separators=(",", ":")))
    assert saved > 0


def test_what_clients_read_keeps_every_field() -> None:
    """A task's result (with a command record inside) and an event are written whole."""
    assert not is_compact(TaskResult.model_construct()) and not is_compact(Event.model_construct())
    event = Event(
        event_id="t-1/1",
        task_id="t-1",
        seq=1,
        type="task.started",
        at="2026-12-04T00:00:00Z",
        phase="received",
    )
    written, _ = payload(event)
    assert set(written) == {f.alias or name for name, f in Event.model_fields.items()}
