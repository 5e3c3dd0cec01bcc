"""What the handlers of a resource stored as one row in PostgreSQL (WorkflowSchedule,
WorkflowTrigger) do alike: refuse an invalid spec, report it applied, delete it, and mirror
its row into the status."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import kopf
import psycopg

from rara.errors import NotFound
from rara.operator import conditions
from rara.operator.refusals import report_refused
from rara.operator.runtime import connection


class Applied(Protocol):
    @property
    def created(self) -> bool: ...
    @property
    def changed(self) -> bool: ...


def refuse_spec(
    body: kopf.Body,
    status: kopf.Status,
    patch: kopf.Patch,
    logger: kopf.Logger,
    *,
    what: str,
    problems: list[str],
    generation: int | None,
) -> None:
    """Ready False, SpecInvalid, the message naming each field, and a Warning Event."""
    report_refused(
        body,
        status,
        patch,
        logger,
        what=what,
        reason="SpecInvalid",
        message="; ".join(problems),
        generation=generation,
        states={"Ready": False},
    )


def report_applied(
    status: kopf.Status,
    patch: kopf.Patch,
    logger: kopf.Logger,
    *,
    noun: str,
    where: str,
    applied: Applied,
    generation: int | None,
    mirrored: Mapping[str, Any] | None,
) -> None:
    """Ready True (Applied), and the row's state when there is one. ``noun``: schedule,
    trigger; ``where``: its qualified name."""
    verb = "created" if applied.created else "changed" if applied.changed else "unchanged"
    logger.info(f"{noun} {where} {verb}")
    if mirrored is not None:
        patch.status.update(mirrored)
    patch.status["conditions"] = conditions.merge(
        status.get("conditions"),
        conditions.condition("Ready", True, "Applied", f"{noun} {verb}", generation),
    )


def delete_stored(
    memo: kopf.Memo,
    logger: kopf.Logger,
    *,
    what: str,
    delete: Callable[[psycopg.Connection[Any]], None],
) -> None:
    """Delete the row; one never stored (its spec was refused) is no error."""
    with connection(memo) as conn:
        try:
            delete(conn)
        except NotFound:
            logger.info(f"{what} was never stored (invalid spec)")
            return
    logger.info(f"{what} deleted")


def patch_changed(
    status: kopf.Status, patch: kopf.Patch, mirrored: Mapping[str, Any] | None
) -> None:
    """The timer's half: only the keys whose value changed (an unchanged status, no PATCH)."""
    if mirrored is None:
        return  # invalid, or not applied yet: the handler's condition says which
    for key, value in mirrored.items():
        if status.get(key) != value:
            patch.status[key] = value
