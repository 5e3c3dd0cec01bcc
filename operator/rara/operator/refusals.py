"""How a handler reports a resource that rara refuses (an invalid spec, an input the
definition refuses): nothing reaches PostgreSQL, and the refusal is said three times, the
message naming the field — in the status conditions, in the log and as a Warning Event. Not
an error for kopf to retry: only a new spec can fix it."""

from __future__ import annotations

from collections.abc import Mapping

import kopf

from rara.operator import conditions

MAX_MESSAGE = 1000  # status and Event messages stay readable in `kubectl describe`


def report_refused(
    body: kopf.Body,
    status: kopf.Status,
    patch: kopf.Patch,
    logger: kopf.Logger,
    *,
    what: str,
    reason: str,
    message: str,
    generation: int | None,
    states: Mapping[str, bool],
) -> None:
    """``states``: the condition types to set, each True or False, all with ``reason`` and
    the message (a WorkflowDefinition: Invalid True, Ready False)."""
    message = message[:MAX_MESSAGE]
    logger.warning(f"{what} is invalid: {message}")
    kopf.warn(body, reason=reason, message=message)
    patch.status["observedGeneration"] = generation
    patch.status["conditions"] = conditions.merge(
        status.get("conditions"),
        *(conditions.condition(t, ok, reason, message, generation) for t, ok in states.items()),
    )
