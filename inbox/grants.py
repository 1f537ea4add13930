"""The approve form's approve-and-remember fields in the inbox: rendered by ``inbox.pages``, read
by ``inbox.service`` (the ``/grants`` page is ``inbox.grants_page``)."""

from __future__ import annotations

from typing import Any

REMEMBER_FIELD = "remember_on"


def remember_controls() -> str:
    """The approve form's optional approve-and-remember fields (``InboxService`` reads them)."""
    return (
        '<details class="remember"><summary>Remember: approve later matching actions too</summary>'
        f'<p><label><input type="checkbox" name="{REMEMBER_FIELD}" value="1"> '
        "remember this approval</label></p>"
        '<p><select name="remember_scope"><option value="agent">for this agent</option>'
        '<option value="thread">for this thread</option>'
        '<option value="tenant">for the whole tenant</option></select></p>'
        '<p><input type="text" name="remember_when" '
        'placeholder="arguments matching, e.g. args.amount &lt;= 500"></p>'
        '<p><input type="text" name="remember_until" '
        'placeholder="until (ISO 8601, e.g. 2026-12-31T18:00:00Z)"></p></details>'
    )


def remember_from_form(form: dict[str, str]) -> dict[str, Any] | None:
    """The decision's ``remember`` from the approve form's fields (None unless ticked)."""
    if not form.get(REMEMBER_FIELD):
        return None
    remember: dict[str, Any] = {"scope": form.get("remember_scope") or "agent"}
    for field in ("when", "until"):
        value = form.get(f"remember_{field}", "").strip()
        if value:
            remember[field] = value
    return remember


__all__ = ["REMEMBER_FIELD", "remember_controls", "remember_from_form"]
