"""`rara cache list|explain|drop`: the step cache's entries (docs/step-cache.md)."""

from __future__ import annotations

from typing import Annotated

import psycopg
import typer
from rich.table import Table

from rara import cache_explain
from rara.cache import BASE_PARTS, CacheKey, Difference
from rara.cli.common import console, fail, reports_errors, stamp
from rara.pg import cache
from rara.pg.connect import database_url

app = typer.Typer(help="The step cache: entries of steps with `cache:`, and why a step missed.")


@app.command("list")
@reports_errors
def list_(
    capability: Annotated[str | None, typer.Option(help="only this name@major")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="entries shown at most")] = 100,
) -> None:
    """Entries, newest first: key, step, where they came from, when they expire."""
    with psycopg.connect(database_url(), autocommit=True) as conn:
        entries = cache.list_entries(conn, capability, limit)
    table = Table("key", "capability", "step", "from", "artifacts", "created", "expires")
    for e in entries:
        table.add_row(
            e.key[7:19] + "…",
            e.capability,
            e.step_key,
            f"run {e.source_run} attempt {e.source_attempt}",
            str(len(e.manifest)),
            stamp(e.created_at),
            stamp(e.expires_at) or "never",
        )
    console.print(table)


@app.command()
@reports_errors
def explain(run_id: int, step: str) -> None:
    """Why STEP of run RUN_ID hit or missed: its key against the entry of the same capability
    and step that matches it best (the fewest differing parts, then input fields, then the
    most artifacts read with the same bytes), part by part: which parts differ, which fields
    of the input, and which of the artifacts that entry's step read the step was given with
    other bytes."""
    with psycopg.connect(database_url(), autocommit=True) as conn:
        found = cache_explain.explain(conn, run_id, step)
    if found is None:
        raise fail(
            f"step {step!r} of run {run_id} has no cache key: its definition has no "
            "`cache:`, or no worker has leased it yet"
        )
    if found.hit:
        assert found.step.reused_from is not None
        console.print(
            f"hit: {found.own} (run {found.step.reused_from.get('run')})", highlight=False
        )
    else:
        console.print(
            f"miss: no entry of base {found.key.base} whose step read what this one was given",
            highlight=False,
        )
    if found.best is None or found.difference is None:
        console.print(
            f"no other entry of {found.step.capability} step {found.step.key}", highlight=False
        )
        return
    console.print(
        f"best-matching entry ({found.candidates} compared): {found.best.key} (run"
        f" {found.best.source_run}); changed: {found.difference.describe()}",
        highlight=False,
    )
    if found.whole_input:
        console.print(
            f"step {found.step.key!r} has no inputSchema naming the run input fields it reads:"
            " the whole run input is in its key, read or not",
            highlight=False,
        )
    console.print(_parts_table(found.key, found.best, found.difference))


def _parts_table(key: CacheKey, other: cache.Candidate, differ: Difference) -> Table:
    """The key's parts beside the entry's (``*``: differs), the differing input fields', and
    each artifact the entry's step read beside what the step was given under that name."""
    table = Table("part", "this step", "best-matching entry")
    for part in BASE_PARTS:
        mark = " *" if part in differ.parts else ""
        table.add_row(part + mark, key.parts.get(part, "")[7:19], other.parts.get(part, "")[7:19])
    for name in differ.fields:
        mine, theirs = key.fields.get(name), (other.fields or {}).get(name)
        table.add_row(
            f"input.{name} *",
            mine[7:19] if mine else "(absent)",
            theirs[7:19] if theirs else "(absent)",
        )
    for name in sorted(other.reads):
        mark = " *" if name in differ.reads else ""
        given = key.upstream.get(name)
        table.add_row(
            f"read {name}{mark}", given[7:19] if given else "(not given)", other.reads[name][7:19]
        )
    return table


@app.command()
@reports_errors
def drop(
    keys: Annotated[list[str] | None, typer.Argument(help="entry keys (sha256:…)")] = None,
    capability: Annotated[str | None, typer.Option(help="every entry of this name@major")] = None,
) -> None:
    """Remove entries: the steps that would have reused them run again. Their blobs stay until
    `rara artifacts gc`."""
    if not keys and capability is None:
        raise fail("name the entries to drop: KEY… or --capability NAME@MAJOR")
    with psycopg.connect(database_url(), autocommit=True) as conn:
        chosen = list(keys or [])
        if capability is not None:
            chosen += [e.key for e in cache.list_entries(conn, capability, 1_000_000)]
        dropped = cache.drop(conn, chosen)
    missing = sorted(set(keys or []) - set(dropped))
    console.print(f"dropped {len(dropped)} entries", highlight=False)
    if missing:
        raise fail("no such entry: " + ", ".join(missing))
