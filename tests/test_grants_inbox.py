"""Remembered grants in the web inbox, over plain HTTP against the dev server: the approve form's
remember fields make a grant (shown in the task's evidence), the `/grants` page lists the viewer's own
grants, another principal cannot revoke one, and the viewer's revoke ends it."""

from __future__ import annotations

import asyncio

from agent_worker.activities.stores.state import build_grant_store
from agent_worker.inbox import build_app, running_inbox
from agent_worker.inbox.pages import task_url
from agent_worker.schemas.tasks import TaskResult

from tests.helpers.browser import fetch
from tests.helpers.support import TaskEnv
from tests.test_inbox_web import csrf_of, listed, session_cookie

SPEC = {
    "agent": "recorder",
    "prompt": "record: 50",
    "policy": {"default_approvers": ["finance-lead"], "grants": {}},
}


async def test_the_inbox_remembers_an_approval_lists_the_grant_and_revokes_it(env: TaskEnv) -> None:
    """Approve with "remember" ticked (scope agent, a condition): the task's evidence names the grant;
    /grants lists it with a revoke form for finance-lead and not for mallory, whose revoke is a 404;
    finance-lead's revoke leaves it revoked in the store, with the reason."""
    handle = await env.start(SPEC)
    [request] = (await env.awaiting_approval(handle)).pending
    app = build_app(env.client, auth="header", grants=build_grant_store(env.config))
    lead = {"X-Forwarded-User": "finance-lead"}
    async with running_inbox(app, "127.0.0.1:0") as url:
        await listed(app, "finance-lead", handle.id)
        page = await asyncio.to_thread(fetch, url + task_url(handle.id), headers=lead)
        assert page.status == 200 and 'name="remember_on"' in page.body
        lead = {**lead, "Cookie": session_cookie(page.headers)}
        form = {
            "csrf": csrf_of(page.body),
            "request_id": request.request_id,
            "version": request.version,
            "decision": "approve",
            "remember_on": "1",
            "remember_scope": "agent",
            "remember_when": "int(args.value) <= 100",
        }
        decided = await asyncio.to_thread(
            fetch, url + task_url(handle.id) + "/decide", form=form, headers=lead
        )
        assert decided.status == 200 and "Decision accepted" in decided.body, decided.body
        result: TaskResult = await asyncio.wait_for(handle.result(), 60)
        grant_id = result.evidence.approvals[0].remembered_as
        assert grant_id is not None

        mine = await asyncio.to_thread(fetch, url + "/grants", headers=lead)
        assert mine.status == 200 and f'id="grant-{grant_id}"' in mine.body
        assert "int(args.value) &lt;= 100" in mine.body and f"/grants/{grant_id}/revoke" in mine.body
        mallory = {"X-Forwarded-User": "mallory"}
        theirs = await asyncio.to_thread(fetch, url + "/grants", headers=mallory)
        assert theirs.status == 200 and grant_id not in theirs.body
        mallory = {**mallory, "Cookie": session_cookie(theirs.headers)}
        stolen = await asyncio.to_thread(
            fetch, url + f"/grants/{grant_id}/revoke", form={"csrf": csrf_of(theirs.body)}, headers=mallory
        )
        assert stolen.status == 404
        assert build_grant_store(env.config).get(grant_id).status == "active"  # type: ignore[union-attr]

        revoked = await asyncio.to_thread(
            fetch,
            url + f"/grants/{grant_id}/revoke",
            form={"csrf": csrf_of(mine.body), "reason": "quarter closed"},
            headers=lead,
        )
        assert revoked.status in (200, 303), revoked.status
        grant = build_grant_store(env.config).get(grant_id)
        assert grant is not None and (grant.status, grant.status_reason) == ("revoked", "quarter closed")
        after = await asyncio.to_thread(fetch, url + "/grants", headers=lead)
        assert "revoked" in after.body and f"/grants/{grant_id}/revoke" not in after.body
