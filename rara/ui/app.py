"""The dashboard's web application: ``create_app(UiConfig)`` → a Starlette app.

Server-rendered pages (Jinja2, autoescaped) over a read-only connection pool; a live view
through server-sent events fed by one shared listener (``rara.ui.live``); cancel, retry and
resume through ``rara.client`` (``rara.ui.actions``). Every asset is in the package (``static/``):
the dashboard works with no network beyond the database."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rara.pg import reconnect
from rara.ui import actions, launch, pages, releases, step_logs
from rara.ui.auth import AuthConfig
from rara.ui.isolation import IsolationWatch
from rara.ui.live import LiveHub
from rara.ui.nav import ApprovalCount

HERE = Path(__file__).parent

# No inline script or style anywhere: a name that slipped past escaping still could not run.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)


@dataclass(frozen=True)
class UiConfig:
    database_url: str
    auth: AuthConfig = field(default_factory=AuthConfig)
    artifacts: str | None = None  # the store (directory or s3://); None: RARA_ARTIFACTS
    pool_size: int = 8
    live_interval: float = 1.0


class Headers:
    """Security headers on every answer, and ``Server-Timing: app;dur=<ms>`` (time to the
    response head) for the benchmark and the browser's network panel."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                took = (time.perf_counter() - started) * 1000
                headers = list(message.get("headers", []))
                headers += [
                    (b"content-security-policy", CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"same-origin"),
                    (b"x-frame-options", b"DENY"),
                    (b"server-timing", f"app;dur={took:.1f}".encode()),
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def create_app(config: UiConfig) -> Starlette:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        config.database_url,
        min_size=1,
        max_size=config.pool_size,
        open=False,
        # Read-only sessions: the pages cannot write even by mistake (actions use their own
        # connection, through rara.client). No prepared statements: each read is planned
        # with its values, so unused filters fold away.
        kwargs={
            "autocommit": True,
            "prepare_threshold": None,
            "connect_timeout": reconnect.CONNECT_TIMEOUT_SECONDS,
            "options": "-c default_transaction_read_only=on -c statement_timeout=15000",
        },
        # Back within ~2 s of the database after an outage (rara.pg.reconnect).
        **reconnect.async_pool_settings(),
    )
    hub = LiveHub(config.database_url, pool, config.live_interval)
    isolation = IsolationWatch(pool)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await pool.open()
        await hub.start()
        await isolation.start()
        try:
            yield
        finally:
            await isolation.stop()
            await hub.stop()
            await pool.close()

    routes = [
        Route("/", pages.home),
        Route("/healthz", pages.healthz),
        Route("/readyz", pages.readyz),
        Route("/runs", pages.runs_list),
        Route("/runs/{run_id:int}", pages.run_page),
        Route("/runs/{run_id:int}/state", pages.run_state),
        Route("/runs/{run_id:int}/events", pages.run_events),
        Route("/runs/{run_id:int}/logs", step_logs.run_logs),
        Route("/runs/{run_id:int}/cancel", actions.cancel, methods=["POST"]),
        Route("/runs/{run_id:int}/pause", actions.pause, methods=["POST"]),
        Route("/runs/{run_id:int}/unpause", actions.unpause, methods=["POST"]),
        Route("/runs/{run_id:int}/retry", actions.retry, methods=["POST"]),
        Route("/runs/{run_id:int}/resume", actions.resume, methods=["POST"]),
        Route("/runs/{run_id:int}/rerun", actions.rerun, methods=["POST"]),
        Route(
            "/runs/{run_id:int}/approvals/{step_key:str}/decide", actions.decide, methods=["POST"]
        ),
        Route("/approvals", pages.approvals_list),
        Route("/live/runs", pages.live_runs),
        Route("/live/approvals", pages.live_approvals),
        Route("/live/runs/{run_id:int}", pages.live_run),
        Route("/definitions", pages.definitions_list),
        Route("/definitions/{name:path}", pages.definition_page),
        Route("/definitions/{name:path}", launch.start, methods=["POST"]),
        Route("/artifacts/{digest:str}", pages.artifact_page),
        Route("/artifacts/{digest:str}/download", pages.artifact_download),
        Route("/releases", releases.releases_list),
        Route("/releases/{name:str}", releases.release_page),
        Route("/schedules", pages.schedules_list),
        Route("/schedules/{name:str}", pages.schedule_page),
        Route("/schedules/{name:str}/pause", actions.schedule_pause, methods=["POST"]),
        Route("/schedules/{name:str}/resume", actions.schedule_resume, methods=["POST"]),
        Route("/fleet", pages.fleet),
        Route("/live/fleet", pages.live_fleet),
        Route("/favicon.ico", pages.favicon),
        Route("/login", actions.login, methods=["GET", "POST"]),
        Route("/logout", actions.logout, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: pages.http_error, 500: pages.server_error},
    )
    app.state.config = config
    app.state.pool = pool
    app.state.hub = hub
    app.state.isolation = isolation  # the banner of rara/ui/templates/base.html
    app.add_middleware(ApprovalCount)  # the navigation's count (rara.ui.nav)
    app.add_middleware(Headers)
    return app
