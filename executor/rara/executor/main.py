"""Entry point of ``rara executor`` and ``python -m rara.executor.main`` (the same command).

SIGTERM (pod deletion, eviction) and SIGINT start a graceful shutdown: health goes
NOT_SERVING, new jobs are refused, running ones get ``grace`` seconds to finish, the
rest are stopped and reported as retryable UNAVAILABLE so a worker runs them elsewhere.
"""

from __future__ import annotations

import asyncio
import signal
import sys

import structlog

from rara import metrics
from rara import settings as rara_settings
from rara.artifacts import open_store
from rara.executor import auth
from rara.executor.plugins import PluginRegistry, load_plugin_modules
from rara.executor.server import create_server
from rara.executor.settings import ExecutorSettings
from rara.logs import configure as configure_logging

log = structlog.get_logger(__name__)


def _auth_config(settings: ExecutorSettings) -> auth.AuthConfig:
    cert, key, ca = settings.tls_cert, settings.tls_key, settings.tls_client_ca
    if (cert is None) != (key is None):
        raise auth.InsecureConfigError("--tls-cert and --tls-key go together")
    if ca is not None and cert is None:
        raise auth.InsecureConfigError("--tls-client-ca needs --tls-cert and --tls-key")
    tls = auth.TlsFiles(cert, key, ca) if cert is not None and key is not None else None
    token = auth.read_token(settings.token_file) if settings.token_file is not None else None
    return auth.AuthConfig(token=token, tls=tls, insecure_loopback=settings.insecure_loopback)


async def serve_async(settings: ExecutorSettings) -> None:
    """Run until SIGTERM/SIGINT, then shut down gracefully."""
    config = _auth_config(settings)
    registry = PluginRegistry()
    load_plugin_modules(registry, settings.plugins)
    listen = settings.listen
    server, port = create_server(
        registry,
        open_store(settings.artifact_root),  # a directory or s3://…; None: RARA_ARTIFACTS
        listen=listen,
        auth_config=config,
        max_concurrency=settings.max_concurrency,
        cancel_grace=settings.cancel_grace,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    metrics_server = None
    if settings.metrics_port is not None:
        # /readyz turns 503 as soon as draining starts, like the gRPC health service.
        draining = server.servicer.draining
        metrics_server = metrics.serve(settings.metrics_port, ready=lambda: not draining.is_set())
        print(f"rara executor metrics on port {metrics_server.server_port}", flush=True)
    address = f"{listen.rsplit(':', 1)[0]}:{port}"
    log.info(
        "executor listening",
        address=address,
        capabilities=[p.capability for p in registry.plugins()],
        max_concurrency=settings.max_concurrency,
    )
    # A plain line too: scripts and tests wait for it without parsing log formats.
    print(f"rara executor listening on {address}", flush=True)
    await stop.wait()
    log.info("executor shutting down", grace=settings.grace)
    await server.stop(settings.grace)
    if metrics_server is not None:
        metrics_server.shutdown()
    log.info("executor stopped")


def run(settings: ExecutorSettings) -> int:
    """Serve until SIGTERM/SIGINT; the exit code (2: refused settings or missing files)."""
    # JSON on stderr when not a TTY; stdout keeps the "listening" line.
    configure_logging(settings.log_level, json=settings.log_json)
    try:
        asyncio.run(serve_async(settings))
    except auth.InsecureConfigError as exc:
        print(f"rara executor: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a missing token or certificate file, a metrics port in use
        print(f"rara executor: {exc}", file=sys.stderr)
        return 2
    return 0


def main() -> None:
    """``python -m rara.executor.main``: the same command as ``rara executor``."""
    rara_settings.main(rara_settings.command(ExecutorSettings, run), "executor")


if __name__ == "__main__":
    main()
