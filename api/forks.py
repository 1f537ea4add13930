"""The HTTP API's fork routes (docs/forks.md)::

    GET  /v1/tasks/{id}/steps               its steps (turns): what each proposed, what ran after it
    POST /v1/tasks/{id}/fork                start a fork of it at a step (201)

The caller must see the original (as for every task route); the fork inherits the original's
policy and tenant, so whoever may see the original may see the fork. A fork id the caller chooses is
scoped to the original's tenant, as ``POST /v1/tasks`` scopes a chosen id.
"""

from collections.abc import Awaitable, Callable
from typing import Any

from agent_worker.schemas.forks import MAX_STEPS, StepRecord
from agent_worker.schemas.tasks import MAX_MODEL_NAME_CHARS, TaskId
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field

from agent_worker.client import AgentWorkerClient


class ForkRequest(BaseModel):
    """A fork to start: the step, and the changes (prompt, agent, model)."""

    at: int = Field(ge=1, le=MAX_STEPS, description="The step (turn) the fork begins with.")
    prompt_edit: str | None = Field(default=None, min_length=1, description="The fork's prompt.")
    agent_version: str | None = Field(
        default=None, min_length=1, description="A registered agent to run instead."
    )
    model: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_MODEL_NAME_CHARS,
        description="Run the fork's turns on this model (resolved as an agent's model string).",
    )
    replay_until: int | None = Field(
        default=None, ge=2, le=MAX_STEPS, description="Steps before this one replay the original's turns."
    )
    task_id: TaskId | None = Field(default=None, description="The fork's id (default: <task>.fork-<hex>).")


class ForkResponse(BaseModel):
    """The fork started."""

    task_id: str
    parent: str
    at: int


def add_fork_routes(
    app: FastAPI,
    tasks: AgentWorkerClient,
    visible: Callable[[str, str], Awaitable[Any]],
    caller: Any,
    scoped: Callable[[str, str], str],
    tenant_of: Callable[[str], Awaitable[str]],
) -> None:
    """Add the fork routes (before the catch-all ``GET /v1/tasks/{id}``, which would take them)."""

    @app.get("/v1/tasks/{task_id:path}/steps", response_model=list[StepRecord])
    async def steps(task_id: str, who: caller) -> list[StepRecord]:  # type: ignore[valid-type]
        """The task's steps, read from its history."""
        await visible(task_id, who)
        try:
            return await tasks.steps(task_id)
        except ValueError as err:
            raise HTTPException(404, str(err)) from None

    @app.post("/v1/tasks/{task_id:path}/fork", status_code=201, response_model=ForkResponse)
    async def fork(task_id: str, body: ForkRequest, who: caller) -> ForkResponse:  # type: ignore[valid-type]
        """Start a fork of the task at ``at``; the original's committed writes are never repeated."""
        await visible(task_id, who)
        chosen = scoped(await tenant_of(task_id), body.task_id) if body.task_id else None
        try:
            ref = await tasks.fork(
                task_id,
                at=body.at,
                prompt_edit=body.prompt_edit,
                agent_version=body.agent_version,
                model=body.model,
                replay_until=body.replay_until,
                fork_id=chosen,
            )
        except ValueError as err:
            raise HTTPException(422, str(err)) from None
        return ForkResponse(task_id=ref.task_id, parent=task_id, at=body.at)


__all__ = ["ForkRequest", "ForkResponse", "add_fork_routes"]
