"""The HTTP API's grant routes: the remembered grants a caller may see, and their revocation.

**Who sees what.** With ``tenants`` configured (principal -> tenants), a caller sees, and may revoke,
every grant of the tenants they act in: revoking is the safe direction, and a colleague's grant is
theirs to stop too. Without it, a caller sees and revokes only the grants they gave. Anything else
answers 404, as for a grant that does not exist. Nobody makes a grant here: only a task that
accepted an approve-and-remember does (``POST /v1/tasks/{id}/decisions`` with ``remember``).
"""

import asyncio
from collections.abc import Callable
from typing import Annotated, Any

from agent_worker.activities.grants import GrantStore
from agent_worker.schemas.grants import Grant
from fastapi import Depends, FastAPI, HTTPException, Query
from pydantic import BaseModel, Field


class RevokeRequest(BaseModel):
    reason: str = Field(default="revoked", min_length=1, max_length=500)


def mount_grant_routes(
    app: FastAPI,
    principal: Callable[..., Any],
    store: GrantStore | None,
    tenant_allowed: Callable[[str, str], bool],
    by_tenant: bool,
) -> None:
    """Add ``GET /v1/grants`` and ``POST /v1/grants/{id}/revoke`` to ``app`` (``principal``: the
    dependency that answers the authenticated caller; ``by_tenant``: whether tenants are configured)."""
    # Annotations are evaluated here (no postponed annotations in this module): FastAPI reads them.
    Caller = Annotated[str, Depends(principal)]

    def visible_to(who: str, grant: Grant) -> bool:
        if by_tenant:
            return tenant_allowed(who, grant.tenant)
        return grant.principal == who

    def grants() -> GrantStore:
        if store is None:
            raise HTTPException(404, "this API has no grant store")
        return store

    @app.get("/v1/grants", response_model=list[Grant])
    async def list_grants(
        who: Caller,
        tenant: str | None = None,
        ended: bool = Query(False, description="Revoked and void grants too."),
    ) -> list[Grant]:
        """The remembered grants the caller may see (active ones; with ``ended``, all)."""
        found = await asyncio.to_thread(grants().listed, tenant, ended=ended)
        return [g for g in found if visible_to(who, g)]

    @app.post("/v1/grants/{grant_id}/revoke", response_model=Grant)
    async def revoke_grant(grant_id: str, body: RevokeRequest, who: Caller) -> Grant:
        """Revoke a grant: the next action it would have approved asks a person again (409 when it
        is revoked or void already)."""
        store = grants()
        grant = await asyncio.to_thread(store.get, grant_id)
        if grant is None or not visible_to(who, grant):
            raise HTTPException(404, f"no grant {grant_id!r} among the grants {who!r} may see")
        if not await asyncio.to_thread(store.end, grant_id, "revoked", body.reason, who):
            raise HTTPException(409, f"grant {grant_id} is {grant.status} already ({grant.status_reason})")
        revoked = await asyncio.to_thread(store.get, grant_id)
        assert revoked is not None
        return revoked


__all__ = ["RevokeRequest", "mount_grant_routes"]
