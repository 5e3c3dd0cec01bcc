"""Entry point: ``python -m rara.executor.main`` now, ``rara executor`` later (calls ``serve``).

SIGTERM (pod deletion, eviction) and SIGINT start a graceful shutdown: health goes
NOT_SERVING, new jobs are refused, running ones get ``--grace`` seconds to finish, the
rest are stopped and reported as retryable UNAVAILABLE so a worker runs them elsewhere.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from rara import metrics
from rara.artifacts import open_store
from rara.executor import auth
from rara.executor.plugins import PluginRegistry, load_plugin_modules
from rara.executor.server import create_server
from rara.logs import configure as configure_logging

log = structlog.get_logger(__name__)


def _auth_config(
    token_file: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    tls_client_ca: str | None,
    insecure_loopback: bool,
) -> auth.AuthConfig:
    if (tls_cert is None) != (tls_key is None):
        raise auth.InsecureConfigError("--tls-cert and --tls-key go together")
    if tls_client_ca is not None and tls_cert is None:
        raise auth.InsecureConfigError("--tls-client-ca needs --tls-cert and --tls-key")
    tls = None
    if tls_cert is not None and tls_key is not None:
        ca = Path(tls_client_ca) if tls_client_ca is not None else None
        tls = auth.TlsFiles(Path(tls_cert), Path(tls_key), ca)
    token = auth.read_token(token_file) if token_file is not None else None
    return auth.AuthConfig(token=token, tls=tls, insecure_loopback=insecure_loopback)


async def serve_async(
    *,
    listen: str,
    artifact_root: str | None,
    plugins: Sequence[str],
    token_file: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    tls_client_ca: str | None = None,
    insecure_loopback: bool = False,
    max_concurrency: int = 16,
    grace: float = 30.0,
    cancel_grace: float = 5.0,
    metrics_port: int | None = None,
) -> None:
    """Run until SIGTERM/SIGINT, then shut down gracefully."""
    config = _auth_config(token_file, tls_cert, tls_key, tls_client_ca, insecure_loopback)
    registry = PluginRegistry()
    load_plugin_modules(registry, plugins)
    server, port = create_server(
        registry,
        open_store(artifact_root),  # a directory or s3://…; None: RARA_ARTIFACTS
        listen=listen,
        auth_config=config,
        max_concurrency=max_concurrency,
        cancel_grace=cancel_grace,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    metrics_server = None
    if metrics_port is not None:
        # /readyz turns 503 as soon as draining starts, like the gRPC health service.
        draining = server.servicer.draining
        metrics_server = metrics.serve(metrics_port, ready=lambda: not draining.is_set())
        print(f"rara executor metrics on port {metrics_server.server_port}", flush=True)
    address = f"{listen.rsplit(':', 1)[0]}:{port}"
    log.info("executor listening", address=address, capabilities=[
        p.capability for p in registry.plugins()], max_concurrency=max_concurrency)
    # A plain line too: scripts and tests wait for it without parsing log formats.
    print(f"rara executor listening on {address}", flush=True)
    await stop.wait()
    log.info("executor shutting down", grace=grace)
    await server.stop(grace)
    if metrics_server is not None:
        metrics_server.shutdown()
    log.info("executor stopped")


def serve(**kwargs: Any) -> None:
    """Blocking form of :func:`serve_async` (same keyword arguments)."""
    asyncio.run(serve_async(**kwargs))


def _port(text: str) -> int:
    port = int(text)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0..65535, got {port}")
    return port


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rara executor", description="Run the executor service.")
    p.add_argument("--listen", default="127.0.0.1:50051", help="host:port (port 0: any)")
    p.add_argument("--token-file", help="file holding the bearer token clients must send")
    p.add_argument("--tls-cert", help="server certificate (PEM)")
    p.add_argument("--tls-key", help="server private key (PEM)")
    p.add_argument("--tls-client-ca", help="CA (PEM) that client certificates must chain to")
    p.add_argument("--insecure-loopback", action="store_true",
                   help="allow no authentication; only with a loopback --listen address")
    p.add_argument("--max-concurrency", type=int, default=16, help="jobs at once")
    p.add_argument("--plugins", nargs="+", default=[], metavar="MODULE",
                   help="modules whose register(registry) adds plugins")
    p.add_argument("--artifact-root", default=None,
                   help="shared artifact store: a directory or s3://bucket/prefix?endpoint=… "
                   "(default: $RARA_ARTIFACTS, else .rara/artifacts)")
    p.add_argument("--grace", type=float, default=30.0,
                   help="seconds running jobs get to finish on SIGTERM")
    p.add_argument("--cancel-grace", type=float, default=5.0,
                   help="seconds a plugin gets to honour a cancel before a hard stop")
    p.add_argument("--metrics-port", type=_port, default=None,
                   help="serve /metrics, /healthz and /readyz over HTTP on this port (0: any)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging()  # JSON on stderr when not a TTY; stdout keeps the "listening" line
    try:
        serve(**vars(args))
    except auth.InsecureConfigError as exc:
        print(f"rara executor: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a missing token or certificate file, a metrics port in use
        print(f"rara executor: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
