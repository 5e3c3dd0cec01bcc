"""`rara executor` (serve) and `rara executor-conformance ADDRESS`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rara.cli.common import console


def executor(ctx: typer.Context) -> None:
    """Run the gRPC executor service (flags: see `rara executor --help`)."""
    from rara.executor.main import main

    raise typer.Exit(main(ctx.args))


EXECUTOR_SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True,
                     "help_option_names": []}


def conformance(
    address: str,
    token_file: Annotated[Path | None, typer.Option(help="file holding the bearer token")] = None,
) -> None:
    """Check any executor implementation at ADDRESS against the rara.v1 contract."""
    from rara.executor.conformance import run_conformance

    token = token_file.read_text().strip() if token_file else None
    report = run_conformance(address, token)
    console.print(report.summary(), highlight=False)
    raise typer.Exit(0 if report.passed else 1)
