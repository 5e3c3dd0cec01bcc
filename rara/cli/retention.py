"""`rara runs prune`: delete the history of finished runs, in bounded batches."""

from __future__ import annotations

import re
import time
from datetime import timedelta
from typing import Annotated

import psycopg
import typer

from rara.cli.common import console, err_console, reports_errors, stamp
from rara.errors import InputInvalid
from rara.pg import retention
from rara.pg.connect import database_url

AGE = re.compile(r"^\s*(\d{1,9})\s*([smhdw])\s*$")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
PROGRESS_SECONDS = 10.0  # a long prune says how far it got this often (on stderr)


def parse_age(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``3600s``, ``2w`` → a timedelta (InputInvalid otherwise)."""
    match = AGE.match(text)
    if match is None:
        raise InputInvalid(
            f"--older-than {text!r}: expected a whole number and a unit, one of "
            "s, m, h, d, w (e.g. 30d)"
        )
    return timedelta(**{UNITS[match.group(2)]: int(match.group(1))})


def describe(counts: retention.PruneCounts) -> str:
    return (
        f"{counts.runs} runs, {counts.steps} steps, {counts.attempts} attempts, "
        f"{counts.events} events, {counts.checkpoints} checkpoints, "
        f"{counts.manifests} artifact manifests"
    )


@reports_errors
def prune(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            help="prune runs that finished longer ago than this: 30d, 12h, 90m, 3600s, 2w",
        ),
    ],
    batch: Annotated[
        int,
        typer.Option(help="runs per batch (each batch one short transaction)", min=1, max=10_000),
    ] = 100,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="count what would be deleted; delete nothing")
    ] = False,
) -> None:
    """Delete finished runs (succeeded, failed, cancelled) and their steps, attempts, events,
    checkpoints and manifests. Blobs stay until `rara artifacts gc`. The schema owner's only."""
    age = parse_age(older_than)
    started = last_report = time.monotonic()
    done = retention.PruneCounts()

    def progress(counts: retention.PruneCounts) -> None:
        nonlocal done, last_report
        done += counts
        if time.monotonic() - last_report >= PROGRESS_SECONDS:
            last_report = time.monotonic()
            err_console.print(f"… {done.runs} runs so far", highlight=False)

    with psycopg.connect(database_url(), autocommit=True) as conn:
        before = retention.horizon(conn, age)
        total = retention.prune(
            conn, before=before, batch=batch, dry_run=dry_run, on_batch=progress
        )
    verb = "would delete" if dry_run else "deleted"
    console.print(
        f"{verb} {describe(total)} (runs finished before {stamp(before)}; "
        f"{time.monotonic() - started:.1f} s)",
        highlight=False,
    )
