"""``rara worker``: run a worker process (flags override ``RARA_WORKER_*`` and the file)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

Opt = typer.Option


def worker(
    handlers: Annotated[list[str] | None, Opt("--handlers", "-H", help="Dotted module paths "
                        "defining `registry = Registry()` (repeatable)")] = None,
    database_url: Annotated[str | None, Opt(help="PostgreSQL URL (default: DATABASE_URL or "
                            "the embedded server)")] = None,
    worker_id: Annotated[str | None, Opt("--id", help="Worker identity (default "
                         "host:pid:random)")] = None,
    capabilities: Annotated[list[str] | None, Opt("--capability", "-c", help="Serve only these "
                            "(repeatable; default: all registered)")] = None,
    concurrency: Annotated[int | None, Opt(help="Attempts run at once")] = None,
    lease_seconds: Annotated[float | None, Opt(help="Lease duration")] = None,
    heartbeat_seconds: Annotated[float | None, Opt(help="Heartbeat interval (lease/3)")] = None,
    jitter: Annotated[float | None, Opt(help="Retry delay jitter, 0..1")] = None,
    shutdown_grace_seconds: Annotated[float | None, Opt(help="Grace on SIGTERM")] = None,
    cancel_grace_seconds: Annotated[float | None, Opt(help="Grace after a cancel request")] = None,
    poll_seconds: Annotated[float | None, Opt(help="Polling interval (NOTIFY fallback)")] = None,
    reaper_seconds: Annotated[float | None, Opt(help="Reaper interval")] = None,
    reaper_batch: Annotated[int | None, Opt(help="Leases recovered per reaper pass")] = None,
    artifact_root: Annotated[Path | None, Opt(help="Local artifact store root")] = None,
    executor_endpoints: Annotated[list[str] | None, Opt("--executor-endpoint", help="gRPC "
                                  "executor host:port (repeatable)")] = None,
    executor_token_file: Annotated[Path | None, Opt(help="File holding the executor's bearer "
                                   "token")] = None,
    metrics_port: Annotated[int | None, Opt(help="Serve /metrics, /healthz, /readyz here")] = None,
    listen: Annotated[bool | None, Opt("--listen/--no-listen", help="NOTIFY wake-ups")] = None,
    log_level: Annotated[str | None, Opt(help="debug, info, warning, error")] = None,
    config: Annotated[Path | None, Opt(help="Settings file (YAML or TOML)")] = None,
) -> None:
    """Lease and run workflow steps until SIGTERM/SIGINT."""
    from pydantic import ValidationError

    from rara.worker.main import run
    from rara.worker.registry import RegistryError
    from rara.worker.settings import load_settings

    try:
        settings = load_settings(
            config, handlers=handlers or None, database_url=database_url, id=worker_id,
            capabilities=capabilities or None, concurrency=concurrency,
            lease_seconds=lease_seconds, heartbeat_seconds=heartbeat_seconds, jitter=jitter,
            shutdown_grace_seconds=shutdown_grace_seconds,
            cancel_grace_seconds=cancel_grace_seconds, poll_seconds=poll_seconds,
            reaper_seconds=reaper_seconds, reaper_batch=reaper_batch,
            artifact_root=artifact_root, listen=listen, log_level=log_level,
            executor_endpoints=executor_endpoints or None, executor_token_file=executor_token_file,
            metrics_port=metrics_port)
        run(settings)
    except (ValidationError, RegistryError, FileNotFoundError, ImportError) as exc:
        typer.echo(f"rara worker: {exc}", err=True)
        raise typer.Exit(2) from None


def main() -> None:
    typer.run(worker)
