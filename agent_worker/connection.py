"""Connecting to Temporal as clients and workers both must: the SDK's environment configuration, and
the data converter the workers share (pydantic JSON, encrypted where keys are set).

Kept apart from ``agent_worker.worker`` so that a client (``agent_worker.client``, the CLI's task
commands) connects without importing the worker: the Agents SDK, the sandboxes, the stores.
"""

from __future__ import annotations

import atexit
import functools
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.envconfig import ClientConfig

from agent_worker.security.codec import converter_for, converter_from_env

if TYPE_CHECKING:
    from agent_worker.schemas.config import WorkerConfig

DEFAULT_ADDRESS = "localhost:7233"
# How long a process that connected waits at exit, before Python finalizes, for the Temporal core's
# threads to finish what its last calls left. Without it about one short client process in 25 here
# aborted or crashed after its work was done (temporalio/sdk-python#300: ``PyGILState_Release``
# while finalizing); with it, none in 300 (``tests/test_client_exit.py`` runs thirty).
EXIT_SETTLE_SECONDS = 0.05

__all__ = ["DEFAULT_ADDRESS", "connect"]


async def connect(
    *, interceptors: Sequence[Any] = (), config: WorkerConfig | None = None, **overrides: Any
) -> Client:
    """Connect to Temporal as the SDK's environment configuration says (default localhost:7233).
    Workers made from the client inherit its ``interceptors`` (tracing) and its data converter: payload
    encryption when ``config`` (else ``AGENT_WORKER_ENCRYPTION_KEYS`` in the environment) has keys
    (clients and workers must share the keys).

    Raises:
        KeySpecError: the encryption settings are malformed.
    """
    connect_config: dict[str, Any] = dict(ClientConfig.load_client_connect_config())
    connect_config.setdefault("target_host", DEFAULT_ADDRESS)
    connect_config.update({k: v for k, v in overrides.items() if v is not None})
    if "data_converter" not in connect_config:
        connect_config["data_converter"] = (
            converter_for(config) if config is not None else converter_from_env(os.environ)
        )
    # Before the attempt: a connect that fails leaves the core's threads finishing too.
    _settle_core_at_exit()
    return await Client.connect(**connect_config, interceptors=list(interceptors))


@functools.cache
def _settle_core_at_exit() -> None:
    """Once per process: wait ``EXIT_SETTLE_SECONDS`` at exit for the core's threads (an atexit
    handler runs before finalization, with threads still alive). Registered on the first connect
    attempt (a failed one too), so a process that never connects never waits."""
    atexit.register(time.sleep, EXIT_SETTLE_SECONDS)
