"""`rara executor` (serve) and `rara executor-conformance ADDRESS`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rara import settings
from rara.cli.common import console
from rara.executor.settings import ExecutorSettings


def _run(config: ExecutorSettings) -> int:
    from rara.executor.main import run  # grpc and the plugins: only when serving

    return run(config)


# One flag per setting of ExecutorSettings (flags > RARA_EXECUTOR_* > --config file).
executor = settings.command(ExecutorSettings, _run)


def conformance(
    address: str,
    token_file: Annotated[Path | None, typer.Option(help="file holding the bearer token")] = None,
    protocol: Annotated[
        str,
        typer.Option(
            help="how the checks send jobs: 'execute' (a call each) or 'session' (all on one "
            "Session stream; the executor must list it in GetCapabilities' protocols)"
        ),
    ] = "execute",
) -> None:
    """Check any executor implementation at ADDRESS against the rara.v1 contract."""
    from rara.executor.conformance import run_conformance

    if protocol not in ("execute", "session"):
        raise typer.BadParameter(
            f"--protocol must be 'execute' or 'session', got {protocol!r}", param_hint="--protocol"
        )
    token = token_file.read_text().strip() if token_file else None
    report = run_conformance(address, token, protocol=protocol)
    console.print(report.summary(), highlight=False)
    raise typer.Exit(0 if report.passed else 1)
