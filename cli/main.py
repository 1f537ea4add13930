"""``agent-worker``: run the embedded server, workers, and tasks from a terminal.

Commands: dev, worker, start, status, inbox (--web), approve, edit, reject, cancel, schedule, events,
evidence, verify, revoke, grant, grants, keys, sandbox-image, reap, replay, policy simulate, shadow,
fork, steps, doctor, report, api, mcp-serve, demo. Each command module registers its own arguments
and handler (``register(subparsers)`` sets ``handler=``); this module builds the top parser, reads the
configuration once (``WorkerConfig``, plus the command's ``config_overrides``), and calls
``args.handler(args, CliContext)``.
The Temporal connection comes from the SDK's environment configuration (``TEMPORAL_ADDRESS``, ...)
unless ``--address`` / ``--namespace`` are given.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from agent_worker.cli import (
    api_command,
    demo,
    devserver,
    doctor,
    events,
    evidence,
    forks,
    grants,
    keys,
    migrate,
    permissions,
    policy_command,
    replay,
    report,
    sandboxes,
    schedules,
    shadow,
    tasks,
    worker_command,
)
from agent_worker.cli.context import CliContext
from agent_worker.cli.errors import CliError

if TYPE_CHECKING:
    from agent_worker.schemas.config import WorkerConfig

# In the order `agent-worker --help` lists them.
COMMAND_MODULES = (
    devserver,
    worker_command,
    migrate,
    tasks,
    schedules,
    events,
    forks,
    evidence,
    permissions,
    grants,
    keys,
    sandboxes,
    replay,
    policy_command,
    shadow,
    doctor,
    report,
    api_command,
    demo,
)


def build_parser() -> argparse.ArgumentParser:
    """The ``agent-worker`` parser: global options, then each command module's own commands."""
    parser = argparse.ArgumentParser(prog="agent-worker", description="Durable AI agent tasks on Temporal.")
    parser.add_argument(
        "--address", help="Temporal frontend host:port (default: TEMPORAL_ADDRESS or localhost:7233)"
    )
    parser.add_argument("--namespace", help="Temporal namespace (default: TEMPORAL_NAMESPACE or 'default')")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def read_config(args: argparse.Namespace) -> WorkerConfig:
    """The process's configuration, read once: ``AGENT_WORKER_*`` plus the command's overrides.

    Raises:
        ConfigError: naming the variable whose value is invalid or unknown.
    """
    from agent_worker.schemas.config import WorkerConfig

    overrides = getattr(args, "config_overrides", None)
    return WorkerConfig.from_env(os.environ, **(overrides(args) if overrides else {}))


async def _dispatch(args: argparse.Namespace, ctx: CliContext) -> int:
    code = args.handler(args, ctx)
    return await code if inspect.isawaitable(code) else code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agent-worker`` console script."""
    args = build_parser().parse_args(argv)
    if not getattr(args, "reads_config", True):  # `dev` replaces this process with the server
        return args.handler(args, None)
    # Loaded once the arguments parsed: ``--help`` and a usage error need none of it.
    from agent_worker.activities.errors import ArtifactUnavailable, StateUnavailable
    from agent_worker.schemas.config import ConfigError
    from agent_worker.security.codec import EncryptionError
    from agent_worker.telemetry import configure_logging

    try:
        config = read_config(args)
        configure_logging(config)
        return asyncio.run(_dispatch(args, CliContext(config, args.address, args.namespace)))
    except (CliError, ConfigError) as err:
        print(f"agent-worker: {err}", file=sys.stderr)
        return getattr(err, "code", 2)
    except KeyboardInterrupt:
        return 130
    except (ArtifactUnavailable, StateUnavailable) as err:  # e.g. a store is down
        print(f"agent-worker: {err}", file=sys.stderr)
        return 2
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
    except Exception as err:
        if not _client_refusal(err):
            raise
        print(f"agent-worker: {err}", file=sys.stderr)
        return 1


def _client_refusal(err: Exception) -> bool:
    """Whether ``err`` is the task client's (no such task, no worker answered, ...): checked without
    importing the client, which only the commands that talk to tasks load."""
    client = sys.modules.get("agent_worker.client")
    return client is not None and isinstance(err, client.AgentWorkerError)


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


__all__ = ["COMMAND_MODULES", "build_parser", "main", "run"]
