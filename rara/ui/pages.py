"""The dashboard's pages (GET only): runs, a run, definitions, artifacts, schedules, the
fleet, and the live streams. Every list is a keyset page; every read is a named statement
(ui.sql, and the statements of `rara runs show --events` and `rara schedules show`)."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, TypeVar
from urllib.parse import quote

from anyio import to_thread, wrap_file
from psycopg_pool import AsyncConnectionPool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)

from rara.artifacts import open_store
from rara.artifacts.api import ArtifactStore
from rara.artifacts.errors import ArtifactNotFound
from rara.artifacts.media_type import is_valid_media_type
from rara.artifacts.store import DEFAULT_MEDIA_TYPE
from rara.namespaces import qualified
from rara.pg.queries import AsyncConn
from rara.pg.schedules import afiring_seen
from rara.ui import charts, data
from rara.ui.dag import StepNode, layout
from rara.ui.definition_view import changed_steps, spec_diff, version_view
from rara.ui.fleet import FLEET, fleet_state
from rara.ui.groups import MapGroup, map_groups
from rara.ui.links import namespace_arg, page_namespace
from rara.ui.listing import cursor, named_page, offered, one_page
from rara.ui.live import APPROVALS, RUNS, LiveHub
from rara.ui.render import page
from rara.ui.result_charts import result_view
from rara.ui.reuse import summarise
from rara.ui.run_links import run_links
from rara.ui.single_values import step_values
from rara.ui.timeline import Reused, timeline
from rara.ui.user_roles import connection, user_of, visible_namespaces
from rara.waits import RUN_PHASES, waiting_for

FAVICON = Path(__file__).parent / "static" / "favicon.svg"
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
STATUSES = list(RUN_PHASES)  # the runs list's filter: a run's phase (rara_run_phase)
DOWNLOAD_CHUNK = 64 * 1024
ROWS = 200  # table rows of a run page (the DAG shows every step); ?rows=all for the rest
EVENTS = 1_000  # a step's events shown (`rara runs show --events` prints them all)

Row = TypeVar("Row")


def _pool(request: Request) -> AsyncConnectionPool[Any]:
    pool: AsyncConnectionPool[Any] = request.app.state.pool
    return pool


async def home(request: Request) -> Response:
    return RedirectResponse("/runs", status_code=302)


async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok")


async def readyz(request: Request) -> Response:
    # The login's own connection: a probe names no user.
    async with _pool(request).connection() as conn:
        await data.now(conn)
    return PlainTextResponse("ready")


def _time_arg(request: Request, name: str, problems: list[str]) -> datetime | None:
    text = request.query_params.get(name, "").strip()
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        problems.append(f"{name}: not a date/time (e.g. 2026-11-30 or 2026-11-30T08:00)")
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _int_arg(request: Request, name: str) -> int | None:
    text = request.query_params.get(name, "")
    return int(text) if text.isdigit() and len(text) < 19 else None


async def runs_list(request: Request) -> Response:
    q = request.query_params
    problems: list[str] = []
    status = q.get("status") or None
    if status is not None and status not in STATUSES:
        problems.append(f"unknown run status {status!r}: use one of {', '.join(STATUSES)}")
        status = None
    namespace = namespace_arg(request)
    definition = q.get("definition", "").strip() or None
    search = q.get("q", "").strip() or None
    since, until = _time_arg(request, "since", problems), _time_arg(request, "until", problems)
    before = _int_arg(request, "before")
    async with connection(request) as conn:
        rows = await data.run_page(
            conn,
            before=before,
            namespace=namespace,
            status=status,
            definition=definition,
            since=since,
            until=until,
            search=search,
            limit=data.PAGE + 1,
        )
        now = await data.now(conn)
        namespaces = await data.namespace_list(conn)
    rows, more = one_page(rows)
    filters = {
        k: v
        for k, v in {
            "namespace": namespace,
            "q": search,
            "status": status,
            "definition": definition,
            "since": q.get("since"),
            "until": q.get("until"),
        }.items()
        if v
    }
    return page(
        request,
        "runs.html",
        runs=rows,
        now=now,
        statuses=STATUSES,
        namespaces=offered(namespaces, namespace),
        filters=filters,
        next_before=rows[-1].id if more else None,
        first_page=before is None,
        problems=problems,
    )


async def _run_or_404(conn: AsyncConn, run_id: int) -> data.RunDetail:
    run = await data.run_get(conn, run_id)
    if run is None:
        raise HTTPException(404, f"no run {run_id}")
    return run


async def run_page(request: Request) -> Response:
    run_id = int(request.path_params["run_id"])
    async with connection(request) as conn:
        run = await _run_or_404(conn, run_id)
        steps = await data.step_list(conn, run_id)
        attempts = await data.attempt_list(conn, run_id)
        metrics = await data.metric_list(conn, run_id)
        artifacts = await data.run_artifact_list(conn, run_id)
        children = await data.map_child_list(conn, run_id) if any(s.is_map for s in steps) else []
        approvals = await data.run_approval_list(conn, run_id)
        links = await run_links(conn, run_id)  # promoted as, resumes, resumed by
        now = await data.now(conn)
    groups = map_groups(steps, children)
    dag = layout([_node(s, groups.get(s.key), now) for s in steps])
    reused = [Reused(s.key, r, s.finished_at) for s in steps if (r := s.reuse)]
    reused += [Reused(c.key, r, c.finished_at) for c in children if (r := c.reuse)]
    metric_charts, metric_rows = charts.metric_view(metrics)
    whole = request.query_params.get("rows") == "all"
    # Every attempt's error (its cause chain and traceback kept after the run ends), then the
    # errors no attempt raised (a step cancelled because its upstream failed).
    raised = {a.key for a in attempts if a.error is not None}
    return page(
        request,
        "run.html",
        run=run,
        steps=steps if whole else steps[:ROWS],
        more_steps=0 if whole else max(len(steps) - ROWS, 0),
        dag=dag,
        timeline=timeline(attempts, now, reused, _step_order(steps, children)),
        reuse=summarise(r.reuse for r in reused),
        attempts=attempts if whole else attempts[:ROWS],
        more_attempts=0 if whole else max(len(attempts) - ROWS, 0),
        artifacts=artifacts,
        charts=metric_charts,
        single_values=step_values(metric_rows),
        now=now,
        attempt_errors=[a for a in attempts if a.error is not None][:ROWS],
        step_errors=[s for s in steps if s.error is not None and s.key not in raised][:ROWS],
        groups=groups,
        approvals=approvals,
        **links,
    )


def _node(step: data.StepLine, group: MapGroup | None, now: datetime) -> StepNode:
    reuse = step.reuse
    waiting = waiting_for(step.wait_kind, step.wait_signal, step.wait_due)
    return StepNode(
        step.key,
        step.depends_on,
        step.status,
        group=group is not None,
        children=group.total if group else None,
        details=group.lines(now) if group else ((waiting,) if waiting else ()),
        badge=reuse.badge if reuse else "",
        badge_title=reuse.title if reuse else "",
        badge_href=(reuse.href or "") if reuse else "",
    )


async def approvals_list(request: Request) -> Response:
    """Approvals waiting for a decision (``?all=1``: decided ones too, after them), of the
    viewer's namespaces: read as the user under ``--user-roles``, so row-level security
    narrows them as it narrows the runs list."""
    namespace = namespace_arg(request)
    decided = request.query_params.get("all") == "1"
    async with connection(request) as conn:
        rows = await data.approval_list(conn, open_only=not decided, namespace=namespace)
        namespaces = await data.namespace_list(conn)
    return page(
        request,
        "approvals.html",
        approvals=rows,
        decided=decided,
        namespace=namespace,
        namespaces=offered(namespaces, namespace),
        limit=data.PAGE,
    )


def _step_order(
    steps: list[data.StepLine], children: list[data.MapChild]
) -> Callable[[str], tuple[int, int]]:
    """A step key's place in the run: its step's, a map's children after their map step."""
    at = {s.key: (i, -1) for i, s in enumerate(steps)}
    at.update({c.key: (at[c.parent][0], c.map_index) for c in children if c.parent in at})
    last = (len(steps), 0)
    return lambda key: at.get(key, last)


async def run_events(request: Request) -> Response:
    """Each step's events, read when asked for (the run page loads them when opened): a
    training step reports thousands, which the run page need not render every time."""
    run_id = int(request.path_params["run_id"])
    async with connection(request) as conn:
        run = await _run_or_404(conn, run_id)
        events = await data.event_list(conn, run_id)
    history: dict[str, list[Any]] = {}
    for e in events:
        history.setdefault(e.key, []).append(e)
    return page(request, "run_events.html", run=run, events=history, max_events=EVENTS)


async def run_state(request: Request) -> Response:
    """The live view's state as one JSON document: the polling fallback of /live/runs/<id>."""
    run_id = int(request.path_params["run_id"])
    async with connection(request) as conn:
        run = await _run_or_404(conn, run_id)
        steps = await data.live_step_list(conn, [run_id])
        running_metrics = await data.live_metric_list(conn, [run_id])
    return JSONResponse(
        {
            "run": {
                "id": run.id,
                "status": run.status,
                "cancel_requested": run.cancel_requested,
                "counts": run.counts,
            },
            "steps": [
                {
                    "key": s.key,
                    "status": s.status,
                    "waits": waiting_for(s.wait_kind, s.wait_signal, s.wait_due),
                    "attempt": s.attempt,
                    "fraction": s.fraction,
                }
                for s in steps
            ],
            "charts": charts.metric_charts(running_metrics),
        }
    )


async def _stream(request: Request, topic: str, run_id: int | None = None) -> Response:
    hub: LiveHub = request.app.state.hub
    namespaces: frozenset[str] | None = None  # None: every namespace
    if user_of(request) is not None:
        # Checked once, as the user, before the first byte: a run the user cannot see is a
        # 404 here, and the lists the hub fans out are narrowed to the user's namespaces.
        async with connection(request) as conn:
            if run_id is not None:
                await _run_or_404(conn, run_id)
            namespaces = await visible_namespaces(conn)

    async def events() -> AsyncIterator[str]:
        async with hub.watch(topic, namespaces) as box:
            yield "retry: 3000\n\n"
            while True:
                state = await box.get(15.0)
                yield ": keep-alive\n\n" if state is None else f"event: state\ndata: {state}\n\n"

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )


async def live_run(request: Request) -> Response:
    run_id = int(request.path_params["run_id"])
    return await _stream(request, f"run:{run_id}", run_id)


async def live_runs(request: Request) -> Response:
    return await _stream(request, RUNS)


async def live_approvals(request: Request) -> Response:
    return await _stream(request, APPROVALS)


async def definitions_list(request: Request) -> Response:
    after = cursor(request)
    namespace = namespace_arg(request)
    search = request.query_params.get("q", "").strip() or None
    async with connection(request) as conn:
        rows = await data.definition_page(
            conn, after=after, namespace=namespace, search=search, limit=data.PAGE + 1
        )
        namespaces = await data.namespace_list(conn)
    filters = {k: v for k, v in {"namespace": namespace, "q": search}.items() if v}
    rows, listing = named_page(rows, request, namespace, namespaces, filters)
    return page(
        request, "definitions.html", definitions=rows, search=search, filters=filters, **listing
    )


async def definition_page(request: Request) -> Response:
    name = request.path_params["name"]
    namespace = page_namespace(request)
    full = qualified(namespace, name)
    async with connection(request) as conn:
        versions = await data.version_list(conn, namespace, name)
        if not versions:
            raise HTTPException(404, f"no workflow definition {full}")
        shown = _int_arg(request, "version") or versions[0].version
        version = await data.version_get(conn, namespace, name, shown)
        if version is None:
            raise HTTPException(404, f"no version {shown} of {full}")
        diff: list[str] | None = None
        changed: list[tuple[str, str]] = []
        a, b = _int_arg(request, "a"), _int_arg(request, "b")
        if a is not None and b is not None:
            old = await data.version_get(conn, namespace, name, a)
            new = await data.version_get(conn, namespace, name, b)
            if old is None or new is None:
                raise HTTPException(404, f"no version {a if old is None else b} of {full}")
            diff = spec_diff(old.spec, new.spec, f"{full}@{a}", f"{full}@{b}")
            changed = changed_steps(old.spec, new.spec)
        results = await data.result_list(conn, namespace, name)
    result_charts, unchanged = result_view(results)
    return page(
        request,
        "definition.html",
        namespace=namespace,
        name=name,
        versions=versions,
        version=version,
        **version_view(namespace, name, version.spec),
        diff=diff,
        changed=changed,
        a=a,
        b=b,
        charts=result_charts,
        unchanged=unchanged,
    )


def _digest(request: Request) -> str:
    digest = str(request.path_params["digest"])
    if not DIGEST.match(digest):
        raise HTTPException(404, "not a digest (sha256:<64 hex digits>)")
    return digest


async def artifact_page(request: Request) -> Response:
    digest = _digest(request)
    async with connection(request) as conn:
        blob = await data.artifact_get(conn, digest)
        if blob is None:
            raise HTTPException(404, f"no artifact {digest}")
        producers = await data.producer_list(conn, digest)
        consumers = await data.consumer_list(conn, digest)
    return page(request, "artifact.html", blob=blob, producers=producers, consumers=consumers)


async def artifact_download(request: Request) -> Response:
    """The blob's bytes, read through the store (verified against the digest before a byte
    is sent), as an attachment: never rendered in the dashboard's origin."""
    digest = _digest(request)
    async with connection(request) as conn:
        blob = await data.artifact_get(conn, digest)
        label = await data.artifact_label(conn, digest, request.query_params.get("name"))
    media_type = label.media_type
    if blob is None:
        raise HTTPException(404, f"no artifact {digest}")
    if not is_valid_media_type(media_type):  # an older or hand-written row: never a header
        media_type = DEFAULT_MEDIA_TYPE
    store = open_store(request.app.state.config.artifacts)
    try:
        verified = await to_thread.run_sync(_verified_copy, store, digest)
    except ArtifactNotFound:
        raise HTTPException(404, f"artifact {digest} is not in the store") from None
    size = os.fstat(verified.fileno()).st_size
    return StreamingResponse(
        _blob_chunks(verified),
        media_type=media_type,
        headers={
            "content-length": str(size),
            "content-disposition": _attachment(label.name, digest),
            "x-rara-digest": digest,
            "content-security-policy": "sandbox",
        },
    )


def _attachment(name: str | None, digest: str) -> str:
    """Content-Disposition naming the file after the artifact (its last path part), as an
    ASCII fallback and as the UTF-8 ``filename*`` of RFC 6266; a blob no manifest names (a
    checkpoint) keeps ``<digest prefix>.bin``."""
    base = (name or "").replace("\\", "/").rsplit("/", 1)[-1].strip()
    if base in ("", ".", ".."):
        return f'attachment; filename="{digest[7:19]}.bin"'
    ascii_name = re.sub(r"[^A-Za-z0-9._+-]", "_", base)
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(base, safe='')}"


def _verified_copy(store: ArtifactStore, digest: str) -> BinaryIO:
    """The blob, verified, as an open file whose name is already gone: nothing a download
    meets later (the client leaving, an error mid-stream) can leave a copy on the disk, and
    the folder is removed whatever ``get_file`` raised."""
    with tempfile.TemporaryDirectory(prefix="rara-ui-") as folder:
        path = os.path.join(folder, "blob")
        store.get_file(digest, path)
        return open(path, "rb")  # closed by _blob_chunks (or, never sent, when dropped)


async def _blob_chunks(verified: BinaryIO) -> AsyncIterator[bytes]:
    async with wrap_file(verified) as source:
        while chunk := await source.read(DOWNLOAD_CHUNK):
            yield chunk


async def schedules_list(request: Request) -> Response:
    after = cursor(request)
    namespace = namespace_arg(request)
    async with connection(request) as conn:
        rows = await data.schedule_page(conn, after=after, namespace=namespace, limit=data.PAGE + 1)
        now = await data.now(conn)
        namespaces = await data.namespace_list(conn)
        firing = await afiring_seen(conn, namespace=namespace)
    rows, listing = named_page(rows, request, namespace, namespaces)
    return page(request, "schedules.html", schedules=rows, firing=firing, now=now, **listing)


async def schedule_page(request: Request) -> Response:
    name = request.path_params["name"]
    namespace = page_namespace(request)
    async with connection(request) as conn:
        schedule = await data.schedule_get(conn, namespace, name)
        if schedule is None:
            raise HTTPException(404, f"no schedule {qualified(namespace, name)}")
        history = await data.schedule_tick_list(conn, namespace, name)
        now = await data.now(conn)
        firing = await afiring_seen(conn, namespace=namespace)
    return page(
        request,
        "schedule.html",
        schedule=schedule,
        firing=firing,
        history=history,
        now=now,
        input=json.dumps(schedule.input, ensure_ascii=False, separators=(", ", ": ")),
    )


async def fleet(request: Request) -> Response:
    if user_of(request) is not None:
        async with connection(request):
            pass  # a user the login may become, or the 401/403 every page gives
    # The fleet is everyone's (workers, the backlog by capability): the login's view, as the
    # live hub's updates of this page are.
    async with _pool(request).connection() as conn:
        tables = await fleet_state(conn)
    return page(request, "fleet.html", tables=tables)


async def live_fleet(request: Request) -> Response:
    return await _stream(request, FLEET)


async def favicon(request: Request) -> Response:
    """Browsers ask for /favicon.ico whatever the page links: the SVG icon, not a 404."""
    return FileResponse(
        FAVICON, media_type="image/svg+xml", headers={"cache-control": "max-age=86400"}
    )


async def http_error(request: Request, exc: Exception) -> Response:
    code = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else str(exc)
    return page(request, "error.html", status_code=code, title=f"{code}", message=detail)


async def server_error(request: Request, exc: Exception) -> Response:
    return page(
        request,
        "error.html",
        status_code=500,
        title="Error",
        message=f"{type(exc).__name__}: {exc}",
    )
