"""The soak's shared-stores mode (``python -m bench.soak --stores shared``): a fleet of hosts.

Each worker process gets its own data dir (standing for its own host); what they share is a
throwaway PostgreSQL (state stores: journal, admission, authorizer, event sink; and the business
writes) and an S3 bucket on a moto server (artifacts), both on loopback. After the soak the checks
here read the outcome from the shared stores, not from a worker's disk:

- business rows and ignored decisions, from PostgreSQL;
- every closed task's evidence bundle, fetched with each worker's config and verified with each
  worker's config (four views per task, each must verify);
- where each agent turn ran, from the history (the identity of its ``ActivityTaskStarted``, a
  worker's pid, mapped to its slot); one task whose turns ran on both workers has every turn run
  again with the other worker's config, which must answer all of its model calls from the shared
  journal and propose the same actions;
- that no worker left shared state on its own disk (artifacts, journal, events, SQLite stores);
- the process-tier sandboxes, which are local to a host: every command and destroy of a sandbox
  goes to its host's home queue (each worker has its own host id), so none may be left in a data
  dir when the tasks close; then each host's own reaper runs (``agent-worker reap`` with that
  worker's settings) and what is still left counts as leftover.

(The turns and the journal: ``bench.soak_journal``.)
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from unittest import mock

import psycopg
from agent_worker.activities.artifacts import ArtifactStore
from agent_worker.activities.stores import postgres_db
from agent_worker.activities.stores.artifacts import build_artifact_store
from agent_worker.cli import evidence as evidence_cli
from agent_worker.cli.devserver import free_port
from agent_worker.cli.evidence import verify_bundle, write_bundle
from agent_worker.schemas.config import WorkerConfig
from agent_worker.schemas.tasks import TaskResult
from agent_worker.telemetry import configure_logging
from agents import set_tracing_disabled
from temporalio.client import Client

from bench import soak_journal
from tests.helpers.postgres_server import PostgresServer, start_postgres
from tests.helpers.s3_server import TEST_CREDENTIALS, new_bucket

# What a worker keeps on its own disk when a store is local: none of it may appear in shared mode.
LOCAL_STATE = ("artifacts", "journal", "events", "business.db", "admission.db", "authz.db")
# Bundles fetched and verified at once (waiting on S3 and PostgreSQL, mostly).
VERIFY_THREADS = 8


@dataclass
class SharedStores:
    """The PostgreSQL server and the S3 bucket every worker of the soak points at."""

    postgres: PostgresServer
    endpoint: str
    bucket: str

    def worker_env(self, data_dir: Path) -> dict[str, str]:
        """The settings of one worker (one host): its own data dir, the shared stores."""
        return {
            "AGENT_WORKER_DATA_DIR": str(data_dir),
            "AGENT_WORKER_STATE_BACKEND": "postgres",
            "AGENT_WORKER_STATE_DSN": self.postgres.dsn,
            "AGENT_WORKER_ARTIFACT_BACKEND": "s3",
            "AGENT_WORKER_ARTIFACT_BUCKET": self.bucket,
            "AGENT_WORKER_ARTIFACT_ENDPOINT_URL": self.endpoint,
            "AGENT_WORKER_BUSINESS_BACKEND": "postgres",
            "AGENT_WORKER_BUSINESS_DSN": self.postgres.dsn,
            **TEST_CREDENTIALS,
        }


@contextlib.contextmanager
def shared_stores(work: Path) -> Iterator[SharedStores]:
    """Start PostgreSQL and a moto S3 server (its own process, so that it does not share the
    driver's interpreter lock) for the block; the test credentials are in this process's
    environment meanwhile, for the checks' S3 clients."""
    added = [k for k in TEST_CREDENTIALS if k not in os.environ]
    os.environ.update({k: TEST_CREDENTIALS[k] for k in added})
    postgres = start_postgres()
    port = free_port()
    with (work / "moto.log").open("ab") as log:
        moto = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        endpoint = f"http://127.0.0.1:{port}"
        _wait_http(endpoint, moto)
        yield SharedStores(postgres, endpoint, new_bucket(endpoint))
    finally:
        postgres_db.close_pools()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(moto.pid, signal.SIGTERM)
        moto.wait(30)
        postgres.close()
        for key in added:
            os.environ.pop(key, None)


def _wait_http(url: str, proc: subprocess.Popen[bytes], within: float = 30) -> None:
    deadline = time.monotonic() + within
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the moto S3 server did not start (exit {proc.poll()})") from None
            time.sleep(0.2)


def business_rows(dsn: str) -> dict[str, list[dict[str, Any]]]:
    """The business rows in PostgreSQL, by task."""
    rows: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    with psycopg.connect(dsn) as conn:
        exists = conn.execute("SELECT to_regclass('business_records')").fetchone()
        if exists is None or exists[0] is None:
            return rows
        for task_id, payload in conn.execute("SELECT task_id, payload_json FROM business_records"):
            rows[task_id].append(json.loads(payload))
    return rows


def ignored_decisions(dsn: str) -> collections.Counter[str]:
    """``approval.ignored`` events per task, as delivered to the shared event sink."""
    with psycopg.connect(dsn) as conn:
        found = conn.execute(
            "SELECT task_id, count(*) FROM agent_worker_events "
            "WHERE event->>'type' = 'approval.ignored' GROUP BY task_id"
        ).fetchall()
    return collections.Counter({task_id: n for task_id, n in found})


def reap_each_host(envs: Sequence[dict[str, str]], work: Path) -> list[str]:
    """Run ``agent-worker reap --min-age 0s`` with each worker's settings, as each host's operator
    (or cron) would: process-tier sandboxes are local to a host, so only its own reaper sees them.
    Returns what each printed last (``removed N, kept M``)."""
    said = []
    for n, env in enumerate(envs):
        done = subprocess.run(
            [sys.executable, "-m", "agent_worker.cli.main", "reap", "--min-age", "0s"],
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
            timeout=120,
        )
        last = (done.stdout.strip().splitlines() or [f"exit {done.returncode}: {done.stderr[-500:]}"])[-1]
        said.append(f"worker {n + 1}: {last}")
    return said


def local_state(data_dirs: Sequence[Path]) -> list[str]:
    """What of ``LOCAL_STATE`` the workers left in their data dirs (empty: nothing)."""
    return [str(d / name) for d in data_dirs for name in LOCAL_STATE if (d / name).exists()]


# ---- evidence, from either side ------------------------------------------------------------------


@dataclass
class EvidenceViews:
    """Bundles fetched with worker ``fetch``'s config and verified with worker ``verify``'s."""

    verified: collections.Counter[tuple[int, int]] = field(default_factory=collections.Counter)
    failures: list[str] = field(default_factory=list)

    def text(self, slots: int, tasks: int) -> str:
        views = [
            f"fetched by {f + 1}, verified by {v + 1}: {self.verified[f, v]}/{tasks}"
            for f in range(slots)
            for v in range(slots)
        ]
        return "; ".join(views)


class _Kept:
    """A store shared by the checks' threads: ``close`` is left to its owner."""

    def __init__(self, store: ArtifactStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def close(self) -> None:
        pass


def verify_evidence(
    results: Sequence[TaskResult], configs: Sequence[WorkerConfig], out: Path
) -> EvidenceViews:
    """Write each task's evidence bundle with each worker's config and verify each bundle with
    each worker's config, through the code of ``agent-worker evidence`` and ``verify``
    (``write_bundle``, ``verify_bundle``). Each config's artifact store is built once: building a
    boto3 client costs half a second, which ``verify`` pays once per run but 800 checks would pay
    800 times."""
    views = EvidenceViews()
    stores = [build_artifact_store(c) for c in configs]
    by_config = {id(c): _Kept(store) for c, store in zip(configs, stores, strict=True)}

    def one(result: TaskResult, fetch: int) -> list[tuple[int, int, str | None]]:
        bundle = out / f"worker-{fetch + 1}" / result.task_id
        shutil.rmtree(bundle, ignore_errors=True)
        _, not_copied = write_bundle(result, bundle, stores[fetch])
        found = []
        for verify in range(len(configs)):
            failed = [c.line() for c in verify_bundle(bundle, configs[verify]) if c.verdict != "ok"]
            failed += [f"not copied: {why}" for why in not_copied]
            found.append((fetch, verify, "; ".join(failed) or None))
        return found

    try:
        with (
            mock.patch.object(evidence_cli, "build_artifact_store", lambda config: by_config[id(config)]),
            ThreadPoolExecutor(VERIFY_THREADS) as pool,
        ):
            jobs = [(r, pool.submit(one, r, f)) for r in results for f in range(len(configs))]
            for result, job in jobs:
                for fetch, verify, failed in job.result():
                    if failed is None:
                        views.verified[fetch, verify] += 1
                    else:
                        views.failures.append(
                            f"{result.task_id} fetched by {fetch + 1}, verified by {verify + 1}: {failed}"
                        )
    finally:
        for store in stores:
            store.close()
    return views


# ---- all of it -----------------------------------------------------------------------------------


@dataclass
class SharedFindings:
    """The shared-stores checks' figures, as rows of the soak's table, and whether they hold."""

    workers: int
    stores: str
    results: int
    evidence: EvidenceViews
    placed: soak_journal.Placement
    shown: soak_journal.JournalShown | None
    on_disk: list[str]
    left_at_close: int = 0  # sandboxes in the data dirs once the tasks closed, before the reapers
    hosts: list[str] = field(default_factory=list)
    reaped: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        views = self.workers * self.workers
        verified = sum(self.evidence.verified.values()) == views * self.results and not self.evidence.failures
        # Every sandbox operation reaches the host that holds the sandbox (its home queue), so none
        # is left for a reaper when the tasks close.
        left = self.left_at_close == 0 and len(set(self.hosts)) == self.workers
        return verified and left and self.shown is not None and self.shown.ok and not self.on_disk

    def rows(self) -> list[tuple[str, str]]:
        by_slot = ", ".join(
            f"{'unknown' if slot is None else f'worker {slot + 1}'} {n}"
            for slot, n in sorted(
                self.placed.turns_by_slot.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)
            )
        )
        shown = (
            "none found"
            if self.shown is None
            else f"{self.shown.task_id}: {'PASS' if self.shown.ok else 'FAIL'}"
        )
        return [
            ("shared stores", self.stores),
            (
                "worker data dirs",
                f"{self.workers}, one per worker; shared state left on them: {len(self.on_disk)}",
            ),
            ("worker host ids (sandbox home queues)", ", ".join(self.hosts) or "derived"),
            (
                "evidence bundles verified (each task fetched and verified with each worker's config)",
                f"{self.evidence.text(self.workers, self.results)}; failures {len(self.evidence.failures)}",
            ),
            ("agent turns by worker (last attempt)", f"{self.placed.turns}: {by_slot}"),
            ("tasks whose turns ran on both workers", str(len(self.placed.tasks_on_both))),
            (
                "sandbox.destroy run on another worker than made the sandbox",
                str(self.placed.destroyed_elsewhere),
            ),
            (
                "sandboxes left in the data dirs when the tasks closed, then each host's reaper "
                "(`agent-worker reap --min-age 0s`)",
                f"{self.left_at_close}; " + "; ".join(self.reaped),
            ),
            (
                "turns retried with calls answered from the journal",
                f"{self.placed.retried_replayed} ({self.placed.replayed_calls} model calls); on the "
                f"other worker after a SIGKILL: {self.placed.retried_across}",
            ),
            ("a task's turns re-run on the other worker's config, all calls from the shared journal", shown),
        ]

    def notes(self) -> list[str]:
        lines = []
        if self.shown is not None:
            lines.append(f"Shared journal, task {self.shown.task_id}:")
            lines += [f"- {line}" for line in self.shown.lines]
        lines += [f"evidence: {failure}" for failure in self.evidence.failures[:20]]
        lines += [f"local state: {path}" for path in self.on_disk[:20]]
        return lines


async def check(
    client: Client,
    configs: Sequence[WorkerConfig],
    outcomes: Sequence[Any],
    slot_of_pid: dict[int, int],
    killed: Sequence[tuple[datetime, int]],
    data_dirs: Sequence[Path],
    work: Path,
) -> SharedFindings:
    """The shared-stores checks, once the workers stopped (the server and the stores still run).
    ``outcomes``: the soak's, each with its ``task_id`` and ``result`` (None: lost); ``killed``: its
    SIGKILLs, (when, slot)."""
    # The turns run again below log at debug and would trace to OpenAI: neither is wanted here.
    configure_logging(configs[0].model_copy(update={"log_level": "warning", "log_format": "console"}))
    set_tracing_disabled(True)
    results = [o.result for o in outcomes if o.result is not None]
    views = await asyncio.to_thread(verify_evidence, results, configs, work / "evidence")
    placed = await soak_journal.placement(client, [o.task_id for o in outcomes], slot_of_pid, killed)
    shown = None
    # A task whose turns ran on both workers; first choice, one with a turn retried on the other
    # worker after a kill (answered from the journal in the soak itself), then any retried turn.
    candidates = sorted(
        placed.tasks_on_both,
        key=lambda t: (
            -sum(r.retried_across for r in placed.runs[t].turns),
            -sum(r.result.usage.replayed_calls > 0 for r in placed.runs[t].turns),
            -len(placed.runs[t].turns),
            t,
        ),
    )
    if candidates:
        task_id = candidates[0]
        shown = await soak_journal.show_shared_journal(task_id, placed.runs[task_id].turns, configs)
    stores = (
        f"PostgreSQL (state stores, business writes), S3 bucket on moto (artifacts): "
        f"{configs[0].artifact_bucket}"
    )
    findings = SharedFindings(
        len(configs), stores, len(results), views, placed, shown, local_state(data_dirs)
    )
    findings.hosts = [c.host for c in configs]
    return findings
