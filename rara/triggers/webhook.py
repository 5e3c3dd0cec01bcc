"""The triggers' process (``rara triggers serve``): the webhook endpoint,
``POST /hooks/<namespace>/<trigger>``, and the watcher of objects triggers in a thread.

A thin HTTP layer over rara.triggers.webhook_events, which judges a delivery and starts its run
once: this module bounds what it reads (no body over MAX_BODY_BYTES is read whole, whatever
a trigger allows), runs the judgement in a thread on a pooled connection, and answers with
the Outcome's status and a JSON body (``{"run": …, "created": …}`` or ``{"error": …}``).
``/healthz`` says the process is up, ``/readyz`` that the database answers. Any number of
these processes may serve one database: exactly once is the database's.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anyio import to_thread
from psycopg_pool import ConnectionPool
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rara.definitions.model import NAME_PATTERN
from rara.namespaces import NAMESPACE_PATTERN
from rara.pg import reconnect
from rara.triggers.model import MAX_BODY_BYTES
from rara.triggers.watching import Watcher
from rara.triggers.webhook_events import Delivery, Outcome, accept

log = logging.getLogger(__name__)
APPLICATION_NAME = "rara triggers serve"


@dataclass(frozen=True)
class WebhookConfig:
    database_url: str
    pool_size: int = 8
    # Objects triggers are watched by the same process (rara.triggers.objects), in a thread;
    # folder triggers only below objects_root.
    watch_objects: bool = True
    objects_root: Path | None = None


class _TooLarge(Exception):
    pass


def create_app(config: WebhookConfig) -> Starlette:
    pool: ConnectionPool[Any] = ConnectionPool(
        config.database_url,
        min_size=1,
        max_size=config.pool_size,
        open=False,
        kwargs={
            "autocommit": True,
            "application_name": APPLICATION_NAME,
            "connect_timeout": reconnect.CONNECT_TIMEOUT_SECONDS,
            "options": "-c statement_timeout=15000",
        },
        **reconnect.pool_settings(),
    )

    watcher = Watcher(config.database_url, config.objects_root)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await to_thread.run_sync(pool.open)
        watching = threading.Thread(target=watcher.run, name="objects-watcher", daemon=True)
        if config.watch_objects:
            watching.start()
        try:
            yield
        finally:
            watcher.stop()
            if watching.is_alive():
                await to_thread.run_sync(watching.join, 10)
            await to_thread.run_sync(pool.close)

    async def hook(request: Request) -> Response:
        namespace = request.path_params["namespace"]
        name = request.path_params["name"]
        if not (_fits(NAMESPACE_PATTERN, namespace) and _fits(NAME_PATTERN, name)):
            return _answer(Outcome(404, f"no webhook trigger {namespace}/{name}"))
        try:
            body = await _bounded_body(request)
        except _TooLarge:
            return _answer(Outcome(413, f"body over {MAX_BODY_BYTES} bytes"))
        except ClientDisconnect:
            return Response(status_code=400)
        delivery = Delivery(namespace, name, dict(request.headers), body)

        def judge() -> Outcome:
            with pool.connection(timeout=10) as conn:
                return accept(conn, delivery, now=time.time())

        try:
            outcome = await to_thread.run_sync(judge)
        except Exception:
            # The database gone, a bug: the sender is told to come again; nothing was started
            # or recorded (the transaction did not commit).
            log.exception("webhook %s/%s: delivery not judged", namespace, name)
            outcome = Outcome(503, "the delivery could not be judged now; send it again")
        if outcome.status >= 400:
            log.info("webhook %s/%s: %s %s", namespace, name, outcome.status, outcome.reason)
        return _answer(outcome)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def readyz(request: Request) -> Response:
        def ping() -> None:
            with pool.connection(timeout=5) as conn:
                conn.execute("SELECT 1")

        try:
            await to_thread.run_sync(ping)
        except Exception as exc:
            return JSONResponse({"ok": False, "error": type(exc).__name__}, status_code=503)
        return JSONResponse({"ok": True})

    routes = [
        Route("/hooks/{namespace}/{name}", hook, methods=["POST"]),
        Route("/healthz", healthz),
        Route("/readyz", readyz),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


async def _bounded_body(request: Request) -> bytes:
    """The request's body, refused (_TooLarge) past MAX_BODY_BYTES without reading the rest."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise _TooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _fits(pattern: str, text: str) -> bool:
    return re.fullmatch(pattern, text) is not None


def _answer(outcome: Outcome) -> Response:
    return Response(
        json.dumps(outcome.as_json()) + "\n",
        status_code=outcome.status,
        media_type="application/json",
    )
