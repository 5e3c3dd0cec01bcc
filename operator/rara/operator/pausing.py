"""A WorkflowRun's ``spec.paused``, the one field of its spec that may change: true pauses its
rara run, false resumes it (rara.pauses; docs/operator.md, "Pausing a WorkflowRun"). The phase
then reads Paused through the sync, as every reader derives it (rara_run_phase).

A WorkflowRun created paused is paused by the create handler, in the transaction that starts
its run (rara.operator.runs), so no worker ever sees it unpaused. Later, a change of the field
pauses or resumes: edge-triggered, so a pause or resume made with `rara runs pause|resume` or
the dashboard stays until the field changes again."""

from __future__ import annotations

from typing import Any

import kopf

from rara.errors import NotFound, RunEnded
from rara.namespaces import qualified
from rara.operator.models import namespace_of
from rara.operator.runtime import connection
from rara.pauses import set_paused


def apply_paused(
    new: Any,
    status: kopf.Status,
    name: str,
    namespace: str | None,
    memo: kopf.Memo,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    """On a change of ``spec.paused``: pause (true) or resume (false, or removed) the run."""
    run_id = status.get("runId")
    run = qualified(namespace_of(namespace), name)
    if not run_id:  # not started yet: the create handler starts it as the spec says then
        return
    try:
        with connection(memo) as conn:
            change = set_paused(conn, int(run_id), bool(new))
    except (RunEnded, NotFound) as exc:  # nothing left to pause or resume
        logger.info(f"run {run}: {exc}")
        return
    logger.info(f"run {run}: {change.text}")
