"""Releases in the dashboard (docs/releases.md, docs/ui.md "Releases"): the list of release
names with their current version, a page per name with its history, and "promoted as NAME@N"
on the page of a run that became a release.

Read-only, as the viewer (rara.ui.user_roles.connection: a user's namespaces under
``--user-roles``), through the statements `rara releases` reads (db/queries/releases.sql) and
three of the dashboard's own (db/queries/ui_releases.sql). Promote and rollback stay with
`rara releases`: the dashboard's login may only read or start runs, and a release is what
applications read, so moving it is a deliberate command."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg.rows import class_row
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from rara.freshness import afreshness
from rara.namespaces import qualified
from rara.pg.queries import AsyncConn, amany, aone
from rara.pg.releases import MoveRow, ReleaseArtifactRow, ReleaseRow, ReleaseSummary
from rara.ui import data
from rara.ui.links import namespace_arg, page_namespace
from rara.ui.listing import cursor, named_page
from rara.ui.render import page
from rara.ui.user_roles import connection


@dataclass(frozen=True, slots=True)
class ReleaseLine:
    """A release name on the list: its current release and the last move of its pointer."""

    namespace: str
    name: str
    current: int
    run_id: int
    definition: str
    definition_version: int
    promoted_by: str
    promoted_at: datetime
    newest: int
    last_action: str | None
    last_moved_by: str | None
    last_moved_at: datetime | None


@dataclass(frozen=True, slots=True)
class RunRelease:
    """A release a run became: "promoted as NAME@N" on the run's page."""

    namespace: str
    name: str
    number: int
    current: bool


@dataclass(frozen=True, slots=True)
class SourceRun:
    id: int
    status: str


async def releases_of_run(conn: AsyncConn, run_id: int) -> list[RunRelease]:
    return await amany(conn, "ui_run_release_list", class_row(RunRelease), run_id=run_id)


async def releases_list(request: Request) -> Response:
    after = cursor(request)
    namespace = namespace_arg(request)
    async with connection(request) as conn:
        rows = await amany(
            conn,
            "ui_release_page",
            class_row(ReleaseLine),
            after=after.name if after else None,
            after_namespace=after.namespace if after else None,
            namespace=namespace,
            limit=data.PAGE + 1,
        )
        now = await data.now(conn)
        namespaces = await data.namespace_list(conn)
        judged = await afreshness(conn, namespace=namespace)
    rows, listing = named_page(rows, request, namespace, namespaces)
    fresh = {(f.namespace, f.name): f for f in judged if f.kind == "release"}
    return page(request, "releases.html", releases=rows, now=now, fresh=fresh, **listing)


def _number_arg(request: Request) -> int | None:
    """``?number=N``: one release of the name other than the current one; a 400 naming the
    parameter when it is not a release number."""
    text = request.query_params.get("number", "").strip()
    if not text:
        return None
    if not text.isdigit() or len(text) > 9 or int(text) < 1:
        raise HTTPException(400, f"query parameter number: not a release number: {text!r}")
    return int(text)


async def release_page(request: Request) -> Response:
    """One release name: the release shown (the current one, or ``?number=N``) with its run,
    that run's gate decisions and its artifacts; every release of the name; every move of its
    pointer, who made it, when and why."""
    name = str(request.path_params["name"])
    namespace = page_namespace(request)
    number = _number_arg(request)
    async with connection(request) as conn:
        shown = await aone(
            conn,
            "release_get",
            class_row(ReleaseRow),
            name=name,
            number=number,
            namespace=namespace,
        )
        if shown is None:
            which = qualified(namespace, name) + (f"@{number}" if number else "")
            raise HTTPException(404, f"no release {which}")
        numbers = await amany(
            conn, "release_list", class_row(ReleaseSummary), name=name, namespace=namespace
        )
        moves = await amany(
            conn, "release_move_list", class_row(MoveRow), name=name, namespace=namespace
        )
        artifacts = await amany(
            conn, "release_artifact_list", class_row(ReleaseArtifactRow), release_id=shown.id
        )
        run = await aone(conn, "ui_release_run", class_row(SourceRun), run_id=shown.run_id)
        gates = await data.run_approval_list(conn, shown.run_id) if run else []
        now = await data.now(conn)
    return page(
        request,
        "release.html",
        release=shown,
        numbers=numbers,
        moves=list(reversed(moves)),  # newest first, as the history is read
        artifacts=artifacts,
        run=run,
        gates=gates,
        now=now,
    )
