"""``agent-worker``: run the embedded server, workers, and tasks from a terminal.

Commands: dev, worker, start, status, inbox (--web), approve, edit, reject, cancel, evidence, verify,
demo, revoke, grant, keys, sandbox-image, reap, replay.
The Temporal connection comes from the SDK's environment configuration (``TEMPORAL_ADDRESS``, ...)
unless ``--address`` / ``--namespace`` are given.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from schemas.config import DEFAULT_TASK_QUEUE, ConfigError, WorkerConfig


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agent-worker", description="Durable AI agent tasks on Temporal.")
    parser.add_argument(
        "--address", help="Temporal frontend host:port (default: TEMPORAL_ADDRESS or localhost:7233)"
    )
    parser.add_argument("--namespace", help="Temporal namespace (default: TEMPORAL_NAMESPACE or 'default')")
    sub = parser.add_subparsers(dest="command", required=True)

    dev = sub.add_parser(
        "dev", help="run the embedded Temporal dev server (SQLite + WAL, search attributes, UI)"
    )
    dev.add_argument("--port", type=int, default=7233)
    dev.add_argument("--ui-port", type=int)
    dev.add_argument("--db-filename", type=Path, default=Path(".agent-worker/temporal.db"))
    dev.add_argument("--headless", action="store_true", help="no Web UI")

    worker = sub.add_parser("worker", help="run a worker until SIGINT/SIGTERM")
    worker.add_argument("--task-queue", help=f"default: AGENT_WORKER_TASK_QUEUE or {DEFAULT_TASK_QUEUE}")
    worker.add_argument("--data-dir", type=Path, help="default: AGENT_WORKER_DATA_DIR or .agent-worker")
    worker.add_argument(
        "--role",
        action="append",
        choices=["all", "workflows", "agent", "sandbox", "business"],
        help="what to run (repeatable; default: AGENT_WORKER_ROLES or all): workflows, agent turns, "
        "sandbox commands, business writes, each on its own task queue",
    )
    worker.add_argument(
        "--health", metavar="HOST:PORT", help="serve GET /healthz here (AGENT_WORKER_HEALTH_BIND)"
    )

    start = sub.add_parser("start", help="start a task from a TaskSpec JSON file or an example")
    start.add_argument("file", nargs="?", help="TaskSpec (or TaskInput) JSON file")
    start.add_argument("--example", help="start a bundled example instead, e.g. monthly-report")
    start.add_argument("--id", help="task id (= workflow id); starting an existing id starts nothing")
    start.add_argument("--task-queue", default=DEFAULT_TASK_QUEUE)
    start.add_argument("--wait", action="store_true", help="show progress and wait for the outcome")

    status = sub.add_parser("status", help="a task's phase, pending approvals, budgets, recent events")
    status.add_argument("task_id")
    status.add_argument("--json", action="store_true")

    events = sub.add_parser("events", help="a task's event timeline (readable, or JSON lines)")
    events.add_argument("task_id")
    events.add_argument("--follow", action="store_true", help="keep printing new events until the task ends")
    events.add_argument("--json", action="store_true", help="one JSON event per line")

    inbox = sub.add_parser("inbox", help="every task waiting for approval (--web: the approval inbox pages)")
    inbox.add_argument("--tenant")
    inbox.add_argument("--json", action="store_true")
    inbox.add_argument("--web", action="store_true", help="serve the web approval inbox instead of printing")
    inbox.add_argument("--bind", default="127.0.0.1:8090", help="--web: host:port (default 127.0.0.1:8090)")
    inbox.add_argument(
        "--auth",
        choices=["token", "header"],
        default="token",
        help="--web: 'token' (sign in with a token from --tokens) or 'header' (a trusted proxy names the "
        "principal; only safe when nothing but that proxy reaches --bind)",
    )
    inbox.add_argument(
        "--tokens", type=Path, help='--web: JSON file {"<token>": "<principal>"} for --auth token'
    )
    inbox.add_argument(
        "--principal-header",
        default="X-Forwarded-User",
        help="--web: the header the proxy sets (--auth header)",
    )
    inbox.add_argument(
        "--keys-dir", type=Path, help="--web: principals' signing keys (default ~/.agent-worker/keys)"
    )
    inbox.add_argument(
        "--data-dir",
        type=Path,
        help="--web: data dir of the artifact store (default AGENT_WORKER_DATA_DIR or .agent-worker)",
    )

    for kind, help_text in (
        ("approve", "approve a request"),
        ("edit", "approve with changed arguments"),
        ("reject", "reject a request"),
    ):
        p = sub.add_parser(kind, help=help_text)
        p.set_defaults(kind=kind)
        p.add_argument("task_id")
        p.add_argument("--request", required=True, help="request id, e.g. req-1")
        p.add_argument(
            "--version", required=True, help="the request's version (sha256:...) you are deciding on"
        )
        p.add_argument("--as", dest="principal", required=True, help="your principal, e.g. finance-lead")
        p.add_argument("--reason", help="why (for a rejection, the message the model sees)")
        p.add_argument(
            "--signal",
            action="store_true",
            help="send as the submit_decision signal instead of the decide update",
        )
        p.add_argument(
            "--sign", action="store_true", help="sign with the principal's key (agent-worker keys new)"
        )
        p.add_argument(
            "--timeout",
            type=float,
            default=30.0,
            help="seconds to wait for a worker's answer (default 30); past it the decision expires "
            "and the task refuses it if it arrives later",
        )
        p.add_argument("--keys-dir", type=Path, help="where private keys live (default ~/.agent-worker/keys)")
        if kind == "edit":
            p.add_argument("--args", required=True, help="JSON object of the arguments to change")

    cancel = sub.add_parser("cancel", help="cancel a task (its sandbox is destroyed)")
    cancel.add_argument("task_id")

    evidence = sub.add_parser("evidence", help="write a closed task's evidence bundle (manifest + artifacts)")
    evidence.add_argument("task_id")
    evidence.add_argument("-o", "--output", type=Path, help="bundle directory (default: evidence-<task id>)")

    verify = sub.add_parser("verify", help="check a bundle against the artifact store and business system")
    verify.add_argument("bundle", type=Path)

    for verb, text in (("revoke", "revoke a principal's permission"), ("grant", "lift a revocation")):
        p = sub.add_parser(verb, help=f"{text} (the default authorizer's list in the data dir)")
        p.set_defaults(verb=verb)
        p.add_argument("principal")
        p.add_argument("--tool", default="*", help="one tool's permission (default: every tool)")
        if verb == "revoke":
            p.add_argument(
                "--reason", default="revoked", help="recorded, and shown where it blocks an action"
            )

    keys = sub.add_parser("keys", help="Ed25519 keys for signed approvals")
    keys.add_argument("action", choices=["new", "show"])
    keys.add_argument("principal")
    keys.add_argument("--keys-dir", type=Path, help="default ~/.agent-worker/keys")

    image = sub.add_parser("sandbox-image", help="build the default Docker sandbox image locally (cached)")
    image.add_argument("--tag", help="default: AGENT_WORKER_DOCKER_IMAGE or agent-worker-sandbox:bookworm")
    image.add_argument("--rebuild", action="store_true")

    reap = sub.add_parser("reap", help="remove sandboxes whose task is closed or unknown")
    reap.add_argument("--min-age", default="10m", help="never touch younger sandboxes (default 10m)")
    reap.add_argument("--dry-run", action="store_true", help="say what would be removed")
    reap.add_argument("--schedule", metavar="EVERY", help="instead, run it on a Temporal Schedule, e.g. 15m")

    from cli.replay import add_parser as add_replay_parser

    add_replay_parser(sub)

    demo = sub.add_parser("demo", help="run the monthly-report example end to end")
    demo.add_argument("--approve", action="store_true", help="approve as the example's approver")
    demo.add_argument("--address", dest="demo_address", default="localhost:7233")
    demo.add_argument("--data-dir", type=Path, default=Path(".agent-worker"))
    demo.add_argument("--task-queue", default=DEFAULT_TASK_QUEUE)
    demo.add_argument("--id", help="task id (default: demo-monthly-report-<time>)")
    demo.add_argument("--headless", action="store_true", help="start the dev server without its UI")
    return parser


def _keys(args: Any) -> int:
    from cli.tasks import CliError
    from security.signing import DEFAULT_KEY_DIR, load_private_key, new_private_key, public_key_text

    key_dir = args.keys_dir or DEFAULT_KEY_DIR
    if args.action == "new":
        key = new_private_key(args.principal, key_dir)
        print(f"private key: {key_dir / (args.principal + '.key')} (keep it; mode 0600)")
    else:
        try:
            key = load_private_key(args.principal, key_dir)
        except (OSError, ValueError) as err:
            raise CliError(
                f"no usable key for {args.principal} in {key_dir} ({err}); "
                f"make one with: agent-worker keys new {args.principal}",
                2,
            ) from None
    print(f"public key for {args.principal}: {public_key_text(key)}")
    print(f'register it in the task policy: "signers": {{"{args.principal}": "{public_key_text(key)}"}}')
    return 0


def _permissions(args: Any) -> int:
    from activities.authz import SqliteAuthorizer
    from cli.tasks import CliError

    config = WorkerConfig.from_env(os.environ)
    if config.authorizer:
        raise CliError(f"permissions live in the configured authorizer ({config.authorizer}), not here")
    authorizer = SqliteAuthorizer(config.authz_db)
    scope = "every tool" if args.tool == "*" else args.tool
    if args.verb == "revoke":
        authorizer.revoke(args.principal, args.tool, args.reason)
        print(f"revoked {args.principal}'s permission for {scope}: approved actions not yet run are blocked")
    elif authorizer.grant(args.principal, args.tool):
        print(f"lifted the revocation of {args.principal} for {scope}")
    else:
        print(f"{args.principal} had no revocation for {scope}")
    return 0


async def _client(args: Any, address: str | None = None) -> Any:
    from worker import connect

    return await connect(target_host=address or args.address, namespace=args.namespace)


async def _run(args: Any) -> int:
    from cli import evidence, tasks

    if args.command == "demo":
        from cli.demo import run_demo

        args.address = args.demo_address
        return await run_demo(args, lambda address: _client(args, address))
    if args.command == "worker":
        from worker import run_worker

        config = WorkerConfig.from_env(
            os.environ,
            task_queue=args.task_queue,
            data_dir=args.data_dir,
            roles=args.role,
            health_bind=args.health,
        )
        await run_worker(config, client_overrides={"target_host": args.address, "namespace": args.namespace})
        return 0
    if args.command in ("revoke", "grant"):
        return _permissions(args)
    if args.command == "keys":
        return _keys(args)
    if args.command == "verify":
        return evidence.cmd_verify(args)
    if args.command == "sandbox-image":
        from cli.sandboxes import cmd_sandbox_image

        return cmd_sandbox_image(args)
    if args.command == "replay":
        from cli.replay import cmd_replay

        return await cmd_replay(args, lambda: _client(args))
    client = await _client(args)
    if args.command == "inbox" and args.web:
        from inbox import cmd_inbox_web

        return await cmd_inbox_web(client, args)
    if args.command == "events":
        from cli.events import cmd_events

        return await cmd_events(client, args)
    if args.command == "reap":
        from cli.sandboxes import cmd_reap

        return await cmd_reap(client, args)
    handler = {
        "start": tasks.cmd_start,
        "status": tasks.cmd_status,
        "inbox": tasks.cmd_inbox,
        "approve": tasks.cmd_decide,
        "edit": tasks.cmd_decide,
        "reject": tasks.cmd_decide,
        "cancel": tasks.cmd_cancel,
        "evidence": evidence.cmd_evidence,
    }[args.command]
    return await handler(client, args)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agent-worker`` console script."""
    args = _parser().parse_args(argv)
    if args.command == "dev":
        from cli.devserver import dev_server_command

        args.db_filename.parent.mkdir(parents=True, exist_ok=True)
        argv_ = dev_server_command(
            port=args.port, db_filename=args.db_filename, ui_port=args.ui_port, headless=args.headless
        )
        os.execv(argv_[0], argv_)
    from cli.tasks import CliError
    from security.codec import EncryptionError
    from telemetry import configure_logging

    try:
        configure_logging(WorkerConfig.from_env(os.environ))
        return asyncio.run(_run(args))
    except (CliError, ConfigError) as err:
        print(f"agent-worker: {err}", file=sys.stderr)
        return getattr(err, "code", 2)
    except KeyboardInterrupt:
        return 130
    except EncryptionError as err:
        print(f"agent-worker: cannot decrypt: {err}", file=sys.stderr)
        return 2
    except KeyError as err:
        if "binary/encrypted" not in str(err):
            raise
        print(
            "agent-worker: this task's payloads are encrypted; set AGENT_WORKER_ENCRYPTION_KEYS "
            "(and AGENT_WORKER_ENCRYPTION_KEY_ID) to the keys the workers use",
            file=sys.stderr,
        )
        return 2
    except RuntimeError as err:
        if "Failed client connect" in str(err):
            print(f"agent-worker: cannot connect to Temporal: {err}", file=sys.stderr)
            return 1
        raise


def run() -> NoReturn:
    """The console script: ``main``, then leave without interpreter finalization. The Temporal
    core's threads and native crypto can still be winding down when Python finalizes, which now and
    then aborted a command that had already done its work (``PyGILState_Release`` during finalizing).
    Output is flushed first; nothing else is left to run at exit."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
