"""`rara runs pause` / `rara runs resume`: hold a run's steps that could be leased, and release
them (rara.pauses; docs/state-machines.md, "Paused runs")."""

from __future__ import annotations

from rara.cli.common import console, reports_errors
from rara.client import Client


@reports_errors
def pause(run_id: int) -> None:
    """Pause a run: its steps not yet leased are held (its running ones go on, and what they
    unblock is held too) until `rara runs resume`. Pausing a paused run changes nothing."""
    console.print(Client().pause_run(run_id).text, highlight=False)


@reports_errors
def resume(run_id: int) -> None:
    """Resume a paused run: its held steps are leasable at once, in their place in the queue.
    (`rara runs retry --from-failure` is the other resume: a new run after a failure.)"""
    console.print(Client().unpause_run(run_id).text, highlight=False)
