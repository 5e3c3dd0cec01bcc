"""`rara runs logs RUN [STEP] [-f]`: what a run's steps wrote (docs/guide.md, "Step logs").

Each line as ``<time> <step>#<attempt>  <text>``: the time its chunk was stored, in the one
format of every command (``stamp``); the text literally (``literal``: never markup, control
characters as their escapes). A line cut between two chunks is printed whole. ``-f`` polls
every ``FOLLOW_SECONDS`` until the step (or the run) has ended and everything it wrote is
printed: an attempt's end is written after the last of its log, so once the end is seen one
more read finds the rest.
"""

from __future__ import annotations

import re
import time
from typing import Annotated

import typer
from rich.text import Text

from rara.cli.common import console, err_console, literal, reports_errors, stamp
from rara.client import Client
from rara.errors import InputInvalid
from rara.pg.step_logs import LogChunk, LogCursor
from rara.states import StepStatus

FOLLOW_SECONDS = 1.0


class LinePrinter:
    """Chunks as whole lines, each with its chunk's time and attempt."""

    def __init__(self) -> None:
        self.held: dict[tuple[str, int], str] = {}  # a line's start, until its end comes

    def add(self, chunk: LogChunk) -> None:
        where = (chunk.key, chunk.attempt)
        text = self.held.pop(where, "") + chunk.body
        *lines, rest = text.split("\n")
        if rest:
            self.held[where] = rest
        prefix = f"{stamp(chunk.created_at)} {chunk.key}#{chunk.attempt}  "
        for line in lines:
            console.print(Text.assemble((prefix, "dim"), literal(line)), soft_wrap=True)

    def finish(self) -> None:
        for (key, attempt), rest in self.held.items():
            console.print(Text.assemble((f"{key}#{attempt}  ", "dim"), literal(rest)))
        self.held.clear()


@reports_errors
def logs(
    run_id: int,
    step: Annotated[
        str | None,
        typer.Argument(
            help="only this step's log (a map step's: its children's too; or one child's: KEY[N])"
        ),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep printing until the step (or run) ends")
    ] = False,
) -> None:
    """What a run's steps wrote (stdout, stderr, logging), every attempt, oldest first."""
    client = Client()
    view = client.get_run(run_id)  # a clear error for an unknown run
    keys = [s["key"] for s in view.steps]
    if step is not None and _listed(step) not in keys:
        raise InputInvalid(f"run {run_id} has no step {step!r} (its steps: {', '.join(keys)})")
    cursor = LogCursor()
    printer = LinePrinter()
    printed = False
    while True:
        ended = not follow or _ended(client, run_id, step)
        while chunks := client.run_logs(run_id, step, cursor):
            printed = True
            for chunk in chunks:
                printer.add(chunk)
        if ended:
            break
        time.sleep(FOLLOW_SECONDS)
    printer.finish()
    if not printed:
        what = f"step {step!r} of run {run_id}" if step else f"run {run_id}"
        err_console.print(f"{what}: no output captured", style="dim")


_CHILD = re.compile(r"^(?P<map>.+)\[\d+\]$")


def _listed(step: str) -> str:
    """The step as the run lists it: a map step's child (``shards[3]``) is its map step's."""
    child = _CHILD.match(step)
    return child["map"] if child else step


def _ended(client: Client, run_id: int, step: str | None) -> bool:
    """Whether the run (or its step; a child's: its map step's) has ended: nothing more will
    be written for it."""
    view = client.get_run(run_id)
    if step is None:
        return view.status.terminal
    key = _listed(step)
    return any(s["key"] == key and StepStatus(s["status"]).terminal for s in view.steps)
