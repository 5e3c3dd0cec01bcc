"""Pausing a run (docs/state-machines.md, "Paused runs"): its steps that could be leased are
held — its running ones go on and end as usual, what they unblock is held too — until it is
resumed, when they are leasable at once, in their place in the queue. The database does it all
(rara_run_set_paused, db/functions/pauses.sql; the hold of steps made ready later is the
step's transition trigger's, rara_check_step_transition); the CLI, the dashboard, the
operator and Client call this."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from rara.errors import NotFound, RunEnded
from rara.pg import runs as run_sql
from rara.runs import retrying_deadlocks


@dataclass(frozen=True)
class PauseChange:
    run_id: int
    paused: bool  # what was asked: paused, or resumed
    changed: bool  # False: the run already was (pausing a paused run changes nothing)
    steps: int  # the steps held by the pause, or released by the resume

    @property
    def text(self) -> str:
        """What happened, as the CLI and the dashboard say it."""
        word = "paused" if self.paused else "resumed"
        if not self.changed:
            return f"run {self.run_id} is already {'paused' if self.paused else 'not paused'}"
        held = "held" if self.paused else "released"
        noun = "step" if self.steps == 1 else "steps"
        return f"run {self.run_id} {word}: {self.steps} {noun} {held}"


def set_paused(conn: psycopg.Connection[Any], run_id: int, paused: bool) -> PauseChange:
    """Pause (``paused``) or resume run ``run_id``; idempotent. NotFound when there is no such
    run (or none the caller may act on), RunEnded when it has ended."""
    row = retrying_deadlocks(lambda: run_sql.set_paused(conn, run_id, paused))
    if row is None:
        raise NotFound(f"no run {run_id}")
    if row.outcome == "ended":
        raise RunEnded(f"run {run_id} has already ended")
    return PauseChange(run_id, paused, row.outcome != "unchanged", row.steps)
