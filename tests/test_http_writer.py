"""The HTTP business writer against the real example service (``examples/business_service``) on a
real socket: exactly once, replays, conflicts, refusals, lost responses and outages."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from agent_worker.activities.business.base import payload_digest, record_id_for
from agent_worker.activities.business.http import HttpBusinessWriter, http_writer
from agent_worker.activities.business.sqlite import SqliteBusinessStore
from agent_worker.activities.errors import WriteConflict, WriteError, WriteUnavailable, WriteUnknown
from agent_worker.examples.business_service import BusinessService
from agent_worker.schemas.writes import WriteInput, WriteOutcome, operation_key


def write_input(call_id: str = "call-1", record_type: str = "invoice", **payload: object) -> WriteInput:
    return WriteInput(
        operation_key=operation_key("task-http", call_id),
        task_id="task-http",
        tenant="acme",
        record_type=record_type,
        payload=payload or {"customer": "c-42", "amount": 1200},
    )


def arm(service: BusinessService, **faults: int) -> None:
    """Arm faults through the service's own admin endpoint."""
    response = httpx.post(f"{service.url}/_faults", json=faults)
    assert response.status_code == 200, response.text


@pytest.fixture
def service(tmp_path: Path) -> Iterator[BusinessService]:
    service = BusinessService(tmp_path / "business.db", faults_enabled=True).start()
    yield service
    service.stop()


@pytest.fixture
def writer(service: BusinessService) -> Iterator[HttpBusinessWriter]:
    with http_writer(service.url, timeout=5.0) as writer:
        yield writer


def test_commit_then_lookup(service: BusinessService, writer: HttpBusinessWriter) -> None:
    """A first write commits one record, with the shared record id and digest, and a lookup returns it."""
    input = write_input()
    receipt = writer.write(input)
    assert receipt.outcome is WriteOutcome.COMMITTED and not receipt.replayed
    assert receipt.record_id == record_id_for(input.operation_key)
    assert receipt.payload_digest == payload_digest(input)
    assert writer.lookup(input.operation_key) == receipt
    assert service.payload(input.operation_key) == input.payload
    assert service.count() == 1


def test_receipts_match_the_sqlite_adapter(writer: HttpBusinessWriter, tmp_path: Path) -> None:
    """The same write through HTTP and through the SQLite reference adapter gives the same receipt."""
    input = write_input()
    over_http = writer.write(input)
    in_sqlite = SqliteBusinessStore(tmp_path / "reference.db").write(input)
    assert over_http.model_dump(exclude={"committed_at"}) == in_sqlite.model_dump(exclude={"committed_at"})


def test_replay_returns_the_first_receipt(service: BusinessService, writer: HttpBusinessWriter) -> None:
    """The same write again returns the original receipt, marked replayed, and adds no record."""
    input = write_input()
    first = writer.write(input)
    again = writer.write(input)
    assert again.replayed
    assert again.model_dump(exclude={"replayed"}) == first.model_dump(exclude={"replayed"})
    assert service.count() == 1


def test_conflict_keeps_the_original(service: BusinessService, writer: HttpBusinessWriter) -> None:
    """The same key with another payload or record type raises WriteConflict and overwrites nothing."""
    input = write_input()
    first = writer.write(input)
    for other in (write_input(amount=9999), write_input(record_type="refund")):
        with pytest.raises(WriteConflict, match=input.operation_key) as caught:
            writer.write(other)
        assert caught.value.retryable == "no"
    assert service.payload(input.operation_key) == input.payload
    assert writer.lookup(input.operation_key) == first
    assert service.count() == 1


def test_business_refusal_is_a_rejected_receipt(service: BusinessService, writer: HttpBusinessWriter) -> None:
    """A 422 refusal becomes a rejected receipt carrying the server's reason, and commits nothing."""
    input = write_input(reject="credit limit exceeded")
    receipt = writer.write(input)
    assert receipt.outcome is WriteOutcome.REJECTED and receipt.record_id is None
    assert "credit limit exceeded" in receipt.detail
    assert writer.lookup(input.operation_key) is None
    assert service.count() == 0


def test_response_lost_after_commit(service: BusinessService, writer: HttpBusinessWriter) -> None:
    """A connection dropped after the commit is WriteUnknown; the lookup then finds exactly one record."""
    input = write_input()
    arm(service, drop_after_commit=1)
    with pytest.raises(WriteUnknown):
        writer.write(input)
    found = writer.lookup(input.operation_key)
    assert found is not None and found.payload_digest == payload_digest(input)
    assert writer.write(input).replayed
    assert service.count(input.operation_key) == 1 and service.count() == 1


def test_503_before_commit_is_unavailable(service: BusinessService, writer: HttpBusinessWriter) -> None:
    """A 503 answered before the commit is WriteUnavailable with nothing committed, and the retry lands."""
    input = write_input()
    arm(service, fail_before_commit=1)
    with pytest.raises(WriteUnavailable) as caught:
        writer.write(input)
    assert caught.value.retryable == "yes"
    assert service.count() == 0 and writer.lookup(input.operation_key) is None
    assert not writer.write(input).replayed
    assert service.count() == 1


def test_service_down_then_restarted(service: BusinessService, writer: HttpBusinessWriter) -> None:
    """While the service is stopped writes and lookups are WriteUnavailable; restarted on the same port
    and database, the write lands once."""
    earlier, input = write_input("call-0"), write_input()
    writer.write(earlier)
    service.stop()
    with pytest.raises(WriteUnavailable):
        writer.write(input)
    with pytest.raises(WriteUnavailable) as caught:
        writer.lookup(input.operation_key)
    assert caught.value.operation == "business.lookup"
    service.start()
    assert writer.write(input).outcome is WriteOutcome.COMMITTED
    assert writer.write(input).replayed
    assert service.count(input.operation_key) == 1 and service.count() == 2


def test_idempotency_key_reaches_the_server(service: BusinessService, writer: HttpBusinessWriter) -> None:
    """The server keys the record by the Idempotency-Key header alone (the body has no key), and refuses
    a write without one."""
    input = write_input()
    writer.write(input)
    assert service.count(input.operation_key) == 1
    stored = httpx.get(f"{service.url}/records/{input.operation_key}").json()
    assert stored["operation_key"] == input.operation_key
    body = input.model_dump(include={"record_type", "tenant", "task_id", "payload"})
    assert httpx.post(f"{service.url}/records", json=body).status_code == 400
    assert service.count() == 1


def test_concurrent_writes_commit_once(service: BusinessService, writer: HttpBusinessWriter) -> None:
    """Eight threads sharing one writer send the same write at once: one commit, seven replays."""
    input = write_input()
    with ThreadPoolExecutor(8) as pool:
        receipts = list(pool.map(lambda _: writer.write(input), range(8)))
    assert sorted(r.replayed for r in receipts) == [False] + [True] * 7
    assert {r.record_id for r in receipts} == {record_id_for(input.operation_key)}
    assert service.count() == 1


def test_service_api_edges(service: BusinessService, tmp_path: Path) -> None:
    """The example service answers health, 404 for an unknown key, 400 for a malformed body, and hides
    its fault hooks unless started with them."""
    assert httpx.get(f"{service.url}/health").json() == {"status": "ok", "records": 0}
    assert httpx.get(f"{service.url}/records/op-missing").status_code == 404
    bad = httpx.post(
        f"{service.url}/records", content=b"{not json", headers={"Idempotency-Key": "op-12345678"}
    )
    assert bad.status_code == 400 and "error" in bad.json()
    with BusinessService(tmp_path / "plain.db") as plain:
        assert httpx.post(f"{plain.url}/_faults", json={"fail_before_commit": 1}).status_code == 404


def test_unresolvable_host_is_unavailable() -> None:
    """A DNS failure means nothing was sent: WriteUnavailable."""
    with HttpBusinessWriter("http://business.invalid", timeout=5.0) as writer:
        with pytest.raises(WriteUnavailable):
            writer.write(write_input())


def test_read_timeout_is_unknown() -> None:
    """A server that takes the request and never answers: the write is WriteUnknown, the lookup
    WriteUnavailable."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # the kernel accepts; nobody answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with HttpBusinessWriter(url, timeout=0.3) as writer:
            with pytest.raises(WriteUnknown):
                writer.write(write_input())
            with pytest.raises(WriteUnavailable):
                writer.lookup(write_input().operation_key)


class _Scripted(BaseHTTPRequestHandler):
    """Any business API: answers every request with the status and body it is given."""

    server: _ScriptedServer

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.do_GET()

    def do_GET(self) -> None:
        status, body = self.server.answer
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _ScriptedServer(ThreadingHTTPServer):
    answer: tuple[int, bytes] = (500, b"")


@pytest.fixture
def scripted() -> Iterator[_ScriptedServer]:
    server = _ScriptedServer(("127.0.0.1", 0), _Scripted)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.mark.parametrize(
    ("status", "body", "error", "retryable"),
    [
        (429, b'{"error": "slow down"}', WriteUnavailable, "yes"),
        (500, b'{"error": "boom"}', WriteUnknown, "no"),
        (502, b"<html>bad gateway</html>", WriteUnknown, "no"),
        (201, b"<html>not a receipt</html>", WriteUnknown, "no"),
        (400, b'{"error": "tenant is required"}', WriteError, "no"),
        (401, b'{"error": "bad token"}', WriteError, "no"),
    ],
)
def test_status_mapping(
    scripted: _ScriptedServer, status: int, body: bytes, error: type[WriteError], retryable: str
) -> None:
    """Each answer of a business API maps to the error the contract gives it."""
    scripted.answer = (status, body)
    with HttpBusinessWriter(f"http://127.0.0.1:{scripted.server_address[1]}") as writer:
        with pytest.raises(error) as caught:
            writer.write(write_input())
    assert type(caught.value) is error and caught.value.retryable == retryable


@pytest.mark.parametrize(("status", "error"), [(500, WriteUnavailable), (403, WriteError)])
def test_lookup_status_mapping(scripted: _ScriptedServer, status: int, error: type[WriteError]) -> None:
    """A lookup's 5xx is WriteUnavailable (retried); a 403 is a non-retryable WriteError."""
    scripted.answer = (status, b'{"error": "no"}')
    with HttpBusinessWriter(f"http://127.0.0.1:{scripted.server_address[1]}") as writer:
        with pytest.raises(error) as caught:
            writer.lookup(write_input().operation_key)
    assert type(caught.value) is error and caught.value.operation == "business.lookup"
