"""An example business API that honours idempotency keys: standard library HTTP, records in SQLite.

::

    POST /records          Idempotency-Key: <operation key>
                           {"record_type": ..., "tenant": ..., "task_id": ..., "payload": {...}}
        201  receipt                      first commit under the key
        200  receipt, "replayed": true    the same key, record type and payload again (the ORIGINAL receipt)
        409  {"error": ...}               the same key with anything else: nothing is overwritten
        400  {"error": ...}               no key, or a malformed body
        422  {"error": ...}               a business refusal (see below): nothing is committed
        503  {"error": ...}               not applied (the database is busy, or a fault)
        500  {"error": ...}               the commit itself failed: it may or may not have applied
    GET  /records/{key}    200 receipt, or 404
    GET  /health           200 {"status": "ok", "records": N}
    POST /_faults          {"drop_after_commit": N, "fail_before_commit": N} (with ``faults_enabled``)

The business rule: a payload whose top-level ``"reject"`` is ``true`` (or a non-empty string, used as
the reason) is refused with 422. It is deterministic, so the same request is always refused.

Receipts carry the same record id and payload digest as the worker's own adapters (``record_id_for``
and ``payload_digest`` in ``activities/business/base.py``), so receipts match whichever adapter wrote them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pydantic
from agent_worker.activities.business.base import payload_digest, record_id_for
from agent_worker.schemas.digests import canonical_json
from agent_worker.schemas.writes import WriteInput, WriteOutcome, WriteReceipt

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20  # bytes

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    operation_key  TEXT PRIMARY KEY,
    record_id      TEXT NOT NULL,
    record_type    TEXT NOT NULL,
    tenant         TEXT NOT NULL,
    task_id        TEXT NOT NULL,
    payload_json   TEXT NOT NULL,
    payload_digest TEXT NOT NULL,
    committed_at   TEXT NOT NULL
)
"""

_FAULTS = ("drop_after_commit", "fail_before_commit")


class _Answer(Exception):
    """Ends a request with ``status`` and ``body`` (an error, or a receipt)."""

    def __init__(self, status: HTTPStatus, body: dict[str, Any]) -> None:
        super().__init__(body.get("error", status.phrase))
        self.status = status
        self.body = body


def _error(status: HTTPStatus, message: str) -> _Answer:
    return _Answer(status, {"error": message})


class BusinessService:
    """The example service, runnable in a background thread (``start``/``stop``, or ``with``).

    Args:
        db_path: the SQLite file holding the records (created if missing; kept across restarts).
        host: the address to listen on.
        port: the port; 0 picks a free one, which is then kept so a restart listens on the same port.
        faults_enabled: serve ``POST /_faults`` (tests only).
    """

    def __init__(
        self, db_path: Path | str, *, host: str = "127.0.0.1", port: int = 0, faults_enabled: bool = False
    ) -> None:
        self.db_path = Path(db_path)
        self.host = host
        self.port = port
        self.faults_enabled = faults_enabled
        self._faults = dict.fromkeys(_FAULTS, 0)
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        with self._db() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(_SCHEMA)

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:8123``."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> BusinessService:
        """Listen and serve in a daemon thread; returns self."""
        if self._server is not None:
            raise RuntimeError("the business service is already running")
        self._server = _Server((self.host, self.port), _Handler, self)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"business-service:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket (new connections are refused)."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        assert self._thread is not None
        self._thread.join()
        self._server = self._thread = None

    def __enter__(self) -> BusinessService:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def count(self, operation_key: str | None = None) -> int:
        """How many records exist (under ``operation_key`` when given)."""
        with self._db() as db:
            if operation_key is None:
                return db.execute("SELECT COUNT(*) FROM records").fetchone()[0]
            return db.execute(
                "SELECT COUNT(*) FROM records WHERE operation_key = ?", (operation_key,)
            ).fetchone()[0]

    def payload(self, operation_key: str) -> dict | None:
        """The payload committed under ``operation_key``, or None."""
        with self._db() as db:
            row = db.execute(
                "SELECT payload_json FROM records WHERE operation_key = ?", (operation_key,)
            ).fetchone()
        return json.loads(row[0]) if row else None

    def set_faults(self, **faults: int) -> dict[str, int]:
        """Arm fault counters (``drop_after_commit``, ``fail_before_commit``); returns them all."""
        unknown = set(faults) - set(_FAULTS)
        if unknown:
            raise ValueError(f"unknown faults: {sorted(unknown)}")
        with self._lock:
            self._faults.update(faults)
            return dict(self._faults)

    # ---- request handling ---------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.db_path, timeout=10, isolation_level=None)

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        db = self._connect()
        try:
            yield db
        finally:
            db.close()

    def _take_fault(self, name: str) -> bool:
        with self._lock:
            if self._faults[name] <= 0:
                return False
            self._faults[name] -= 1
            return True

    def _write(self, input: WriteInput) -> tuple[HTTPStatus, WriteReceipt]:
        """Commit ``input`` once; raises ``_Answer`` for everything but a commit or a replay."""
        digest = payload_digest(input)
        try:
            db = self._connect()
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as err:
            raise _error(HTTPStatus.SERVICE_UNAVAILABLE, f"database unavailable: {err}") from err
        committing = False
        try:
            existing = _select(db, input.operation_key)
            if existing is not None:
                db.execute("COMMIT")
                if (existing.record_type, existing.payload_digest) != (input.record_type, digest):
                    raise _error(
                        HTTPStatus.CONFLICT,
                        f"idempotency key {input.operation_key} was already used for another write "
                        f"({existing.record_type} {existing.payload_digest}, "
                        f"not {input.record_type} {digest})",
                    )
                return HTTPStatus.OK, existing.model_copy(update={"replayed": True})
            reason = _refusal(input.payload)
            if reason is not None:
                db.execute("ROLLBACK")
                raise _error(HTTPStatus.UNPROCESSABLE_ENTITY, reason)
            receipt = WriteReceipt(
                operation_key=input.operation_key,
                outcome=WriteOutcome.COMMITTED,
                record_id=record_id_for(input.operation_key),
                record_type=input.record_type,
                payload_digest=digest,
                committed_at=datetime.now(UTC),
            )
            db.execute(
                "INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    input.operation_key,
                    receipt.record_id,
                    input.record_type,
                    input.tenant,
                    input.task_id,
                    canonical_json(input.payload).decode("utf-8"),
                    digest,
                    receipt.committed_at.isoformat(),
                ),
            )
            committing = True
            db.execute("COMMIT")
        except sqlite3.Error as err:
            if committing:  # the commit may have reached the file: the client must look it up
                raise _error(HTTPStatus.INTERNAL_SERVER_ERROR, f"commit failed: {err}") from err
            raise _error(HTTPStatus.SERVICE_UNAVAILABLE, f"write failed before commit: {err}") from err
        finally:
            db.close()
        return HTTPStatus.CREATED, receipt

    def _lookup(self, operation_key: str) -> WriteReceipt | None:
        with self._db() as db:
            return _select(db, operation_key)


def _select(db: sqlite3.Connection, operation_key: str) -> WriteReceipt | None:
    row = db.execute(
        "SELECT record_id, record_type, payload_digest, committed_at FROM records WHERE operation_key = ?",
        (operation_key,),
    ).fetchone()
    if row is None:
        return None
    return WriteReceipt(
        operation_key=operation_key,
        outcome=WriteOutcome.COMMITTED,
        record_id=row[0],
        record_type=row[1],
        payload_digest=row[2],
        committed_at=datetime.fromisoformat(row[3]),
    )


def _refusal(payload: dict[str, Any]) -> str | None:
    """The business rule: ``"reject": true`` (or a non-empty reason string) is refused."""
    reject = payload.get("reject")
    if reject is True:
        return "refused by business rule: the payload asks to be rejected"
    if isinstance(reject, str) and reject:
        return f"refused by business rule: {reject}"
    return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[_Handler], service: BusinessService) -> None:
        self.service = service
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.0: one request per connection, so a stopped service never answers on a kept-alive socket.
    protocol_version = "HTTP/1.0"
    server: _Server

    def do_GET(self) -> None:
        service = self.server.service
        try:
            if self.path == "/health":
                self._send(HTTPStatus.OK, {"status": "ok", "records": service.count()})
            elif self.path.startswith("/records/") and len(self.path) > len("/records/"):
                key = unquote(self.path.removeprefix("/records/"))
                receipt = service._lookup(key)
                if receipt is None:
                    raise _error(HTTPStatus.NOT_FOUND, f"no record under key {key}")
                self._send(HTTPStatus.OK, receipt.model_dump(mode="json"))
            else:
                raise _error(HTTPStatus.NOT_FOUND, f"no route for GET {self.path}")
        except _Answer as answer:
            self._send(answer.status, answer.body)
        except sqlite3.Error as err:
            self._send(HTTPStatus.SERVICE_UNAVAILABLE, {"error": f"database unavailable: {err}"})

    def do_POST(self) -> None:
        service = self.server.service
        try:
            if self.path == "/records":
                self._post_record(service)
            elif self.path == "/_faults" and service.faults_enabled:
                body = self._json_body()
                if not all(name in _FAULTS and type(n) is int and n >= 0 for name, n in body.items()):
                    raise _error(HTTPStatus.BAD_REQUEST, f"faults are non-negative counts of {_FAULTS}")
                self._send(HTTPStatus.OK, service.set_faults(**body))
            else:
                raise _error(HTTPStatus.NOT_FOUND, f"no route for POST {self.path}")
        except _Answer as answer:
            self._send(answer.status, answer.body)

    def _post_record(self, service: BusinessService) -> None:
        key = self.headers.get("Idempotency-Key", "").strip()
        if not key:
            raise _error(HTTPStatus.BAD_REQUEST, "the Idempotency-Key header is required")
        body = self._json_body()
        try:
            input = WriteInput.model_validate({**body, "operation_key": key})
        except pydantic.ValidationError as err:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
            raise _error(HTTPStatus.BAD_REQUEST, f"malformed record: {problems}") from err
        if service._take_fault("fail_before_commit"):
            raise _error(HTTPStatus.SERVICE_UNAVAILABLE, "fault: failing before commit")
        status, receipt = service._write(input)
        if status is HTTPStatus.CREATED and service._take_fault("drop_after_commit"):
            log.info("fault: dropping the connection after committing %s", key)
            self.close_connection = True
            return
        self._send(status, receipt.model_dump(mode="json"))

    def _json_body(self) -> dict[str, Any]:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise _error(HTTPStatus.BAD_REQUEST, "a Content-Length header is required") from None
        if not 0 <= length <= MAX_BODY:
            raise _error(HTTPStatus.BAD_REQUEST, f"the body must be at most {MAX_BODY} bytes")
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError as err:
            raise _error(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {err}") from err
        if not isinstance(body, dict):
            raise _error(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
        return body

    def _send(self, status: HTTPStatus, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


def main(argv: list[str] | None = None) -> None:
    """Run the service in the foreground until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--db", type=Path, default=Path("business.db"), help="the SQLite file of records")
    parser.add_argument("--faults", action="store_true", help="serve POST /_faults (testing only)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    service = BusinessService(args.db, host=args.host, port=args.port, faults_enabled=args.faults)
    server = _Server((service.host, service.port), _Handler, service)
    log.info("business service on http://%s:%d (records in %s)", service.host, service.port, args.db)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
