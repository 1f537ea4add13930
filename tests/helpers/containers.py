"""Docker containers of a task, as the tests count them.

By the list endpoint alone (docker-py's ``sparse``): the daemon lists a container a moment before it
can inspect it (while creating it) and after (while removing it), so listing and then inspecting
each, as docker-py does by default, fails now and then on a sandbox being made or destroyed.
"""

from __future__ import annotations

from typing import Any

import docker
from agent_worker.activities.sandbox.base import LABEL_TASK


def task_containers(task_id: str, *, running_only: bool = False, daemon: Any = None) -> list[Any]:
    """Every container labelled with the task id (only the running ones with ``running_only``), as
    sparse docker-py objects: ``id`` and the calls that take it (``top``, ``exec_run``) work."""
    daemon = daemon or docker.from_env()
    return daemon.containers.list(
        all=not running_only, sparse=True, filters={"label": f"{LABEL_TASK}={task_id}"}
    )


def containers_of(task_id: str) -> list[str]:
    """Ids of every container (running or not) labelled with the task id."""
    return [c.id for c in task_containers(task_id)]


def the_container(task_id: str) -> Any | None:
    """The task's one container once the daemon can inspect it (a full docker-py object), else None:
    for ``until``, which polls it through the moment between being listed and being inspectable."""
    daemon = docker.from_env()
    listed = task_containers(task_id, daemon=daemon)
    if len(listed) != 1:
        return None
    try:
        return daemon.containers.get(listed[0].id)
    except docker.errors.NotFound:
        return None
