"""The navigation's count on Approvals: how many gates wait for a decision that the viewer
can see, on every page, so that "this needs me" shows before anything is clicked.

A middleware reads it once per page (``ui_open_approval_count``: a probe of the open
approvals' index, counted up to ``LIMIT``) as the viewer (rara.ui.user_roles.connection: a
user's namespaces under ``--user-roles``), and leaves it on ``request.state`` for
rara.ui.render.page. Only pages: the live streams, the static files, downloads and probes
read nothing more. A failed read (a request without the proxy's header under
``--user-roles``, the database away) shows no count: the page says why on its own.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from rara.pg.queries import avalue
from rara.ui.user_roles import connection

LIMIT = 100  # counted up to this many; shown as "99+" beyond
QUIET = ("/static/", "/live/", "/healthz", "/readyz", "/favicon.ico")


def shown(count: int | None) -> str:
    """The count as the link shows it: "" for none (or unknown), "99+" at the limit."""
    if not count:
        return ""
    return f"{LIMIT - 1}+" if count >= LIMIT else str(count)


def is_page(request: Request) -> bool:
    path = request.url.path
    return (
        request.method == "GET"
        and not path.startswith(QUIET)
        and not path.endswith(("/download", "/state", "/events"))
    )


class ApprovalCount:
    """Pure ASGI (no response wrapping: the live streams pass untouched)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope)
            if is_page(request):
                request.state.open_approvals = await _count(request)
        await self.app(scope, receive, send)


async def _count(request: Request) -> int | None:
    try:
        async with connection(request) as conn:
            return await avalue(conn, "ui_open_approval_count", int, limit=LIMIT)
    except Exception:  # shown by the page itself (401, 403, 503): no count then
        return None
