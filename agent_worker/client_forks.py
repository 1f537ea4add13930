"""Forks (docs/forks.md) from the client: ``steps`` lists a task's steps from its history (the
cluster's or an exported one), ``fork`` starts a fork at one of them. Part of ``AgentWorkerClient``,
kept in a module of its own; the history reading it needs is imported on the first call."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.client import Client

# An exported history: a file's path or its parsed JSON, or several (the runs of one task).
Exported = str | Path | dict[str, Any] | Sequence[str | Path | dict[str, Any]]

if TYPE_CHECKING:
    from agent_worker.activities.artifacts import ArtifactStore
    from agent_worker.client_types import TaskRef
    from agent_worker.schemas.forks import StepRecord
    from agent_worker.schemas.tasks import TaskInput, TaskSpec


class ForkCalls:
    """Listing a task's steps and forking it: the part of ``AgentWorkerClient`` that forks."""

    temporal: Client
    task_queue: str

    if TYPE_CHECKING:  # the client's own calls, which these use

        def __init__(self, client: Client, task_queue: str = ...) -> None: ...

        async def start(
            self, spec: TaskSpec | TaskInput | dict[str, Any], task_id: str | None = None
        ) -> TaskRef: ...

    async def steps(self, task_id: str, *, history: Exported | None = None) -> list[StepRecord]:
        """The task's steps (its turns), read from its history: what each proposed and what ran after.
        ``history``: from this exported history (a path or parsed JSON, or a list of them: the runs of
        one task) instead of the cluster.

        Raises:
            ValueError: no task with that id, or not an exported history (``ForkRefused``).
        """
        from agent_worker.activities.task_history import load_exported, read_exported, read_history, steps_of

        if history is None:
            return steps_of(await read_history(self.temporal, task_id))
        exported = await asyncio.to_thread(load_exported, history)
        return steps_of(await read_exported(task_id, exported, self.temporal.data_converter))

    async def fork(
        self,
        task_id: str,
        *,
        at: int,
        prompt_edit: str | None = None,
        agent_version: str | None = None,
        model: str | None = None,
        replay_until: int | None = None,
        fork_id: str | None = None,
        history: Exported | None = None,
        store: ArtifactStore | None = None,
    ) -> TaskRef:
        """Start a fork of ``task_id`` at step ``at``: a new task with the original's state there
        (conversation, artifacts, spend, its sandbox rebuilt in a fresh one), which never repeats a
        business write the original committed. ``prompt_edit`` replaces the prompt, ``agent_version``
        the agent (a registration's name), ``model`` the agent's model (``TaskSpec.model``); steps
        before ``replay_until`` replay the original's turns.

        ``history``: read the original from this exported history (a file's path or its parsed JSON,
        one run as ``temporal workflow show -o json`` writes it; a list of them for a task of several
        runs, one that waited for a person) instead of the cluster; it is put in
        ``store`` (the artifact store the workers use, ``build_artifact_store(config)``) for the
        worker to read, and the fork starts on this client's task queue. ``task_id`` then names the
        original for the fork's evidence and events.

        Raises:
            ValueError: no such task or step, not an exported history, a history without ``store``,
                or a change this version cannot make (``ForkRefused``).
        """
        from agent_worker.activities.task_history import (
            fork_spec,
            load_exported,
            new_fork_id,
            read_exported,
            read_history,
        )

        history_ref = None
        if history is None:
            read = await read_history(self.temporal, task_id)
            # On the task queue the original ran on: its agent is served there.
            queue = read.task_queue or self.task_queue
        else:
            if store is None:
                raise ValueError("a fork from an exported history needs the workers' artifact store (store=)")
            exported = await asyncio.to_thread(load_exported, history)
            read = await read_exported(task_id, exported, self.temporal.data_converter)
            history_ref = await asyncio.to_thread(store.put_json, exported)
            queue = self.task_queue
        spec = fork_spec(
            read,
            at,
            prompt_edit=prompt_edit,
            agent_version=agent_version,
            model=model,
            replay_until=replay_until,
            history=history_ref,
        )
        starter = type(self)(self.temporal, queue)
        return await starter.start(spec, fork_id or new_fork_id(task_id))
