"""An event sink that kills its own worker process right after a local delivery holding an approval
request, once per data dir: the workflow task that delivered it never commits, and its retry (on
another worker) numbers its events otherwise when input arrived meanwhile. Configured as
``AGENT_WORKER_EVENT_SINK=tests.helpers.killing_sink:factory`` in a spawned worker."""

from __future__ import annotations

import os
import signal

from agent_worker.activities.events import JsonlEventSink
from agent_worker.schemas.config import WorkerConfig
from agent_worker.schemas.events import Event, EventType


class KillingSink(JsonlEventSink):
    def __init__(self, config: WorkerConfig) -> None:
        super().__init__(config.events_dir)
        self.mark = config.data_dir / "killed-after-local-delivery"

    def publish_from(self, task_id: str, events: list[Event], basis: int) -> tuple[int, int]:
        stored = super().publish_from(task_id, events, basis)
        if not self.mark.exists() and any(e.type is EventType.APPROVAL_REQUESTED for e in events):
            self.mark.write_text(str(basis))
            os.kill(os.getpid(), signal.SIGKILL)
        return stored


def factory(config: WorkerConfig) -> KillingSink:
    return KillingSink(config)
