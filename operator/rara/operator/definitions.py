"""WorkflowDefinition handlers: a valid spec becomes an immutable version in PostgreSQL.

Re-applying the same spec (a resume after restart, a touched annotation) finds the version by
digest and writes nothing. An invalid spec is reported in the status (condition Invalid, the
message naming step and field) and nothing reaches PostgreSQL; it is not an error to retry,
because only a new spec can fix it. Delete retires the name; its versions stay, so runs that
pinned them keep working and history is kept.

A resource's Kubernetes namespace is its rara namespace (rara.namespaces): the same name in
two namespaces is two definitions, with two histories, and a delete retires only its own.
"""

from __future__ import annotations

from typing import Any

import kopf

from rara.definitions.parse import definition_from_object
from rara.definitions.registry import apply_definition
from rara.errors import DefinitionInvalid
from rara.namespaces import qualified
from rara.operator import conditions
from rara.operator.models import document_of, namespace_of
from rara.operator.refusals import report_refused
from rara.operator.runtime import connection
from rara.pg import definitions as sql


def reconcile_definition(
    body: kopf.Body,
    name: str,
    namespace: str | None,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    generation = meta.get("generation")
    namespace = namespace_of(namespace)
    document = document_of(body, name)
    try:
        definition = definition_from_object(document)
    except DefinitionInvalid as exc:
        report_refused(
            body,
            status,
            patch,
            logger,
            what=f"definition {qualified(namespace, name)}",
            reason="SpecInvalid",
            message="; ".join(exc.problems),
            generation=generation,
            states={"Invalid": True, "Ready": False},
        )
        return
    with connection(memo) as conn:
        applied = apply_definition(conn, definition, namespace=namespace)
    verb = "registered" if applied.created else "already registered as"
    logger.info(
        f"definition {qualified(namespace, name)} {verb} version {applied.version} "
        f"({applied.digest})"
    )
    patch.status["observedGeneration"] = generation
    patch.status["version"] = applied.version
    patch.status["digest"] = applied.digest
    patch.status["conditions"] = conditions.merge(
        status.get("conditions"),
        conditions.condition("Invalid", False, "SpecValid", "", generation),
        conditions.condition(
            "Ready", True, "VersionRegistered", f"version {applied.version} registered", generation
        ),
    )


def retire_definition(
    name: str, namespace: str | None, memo: kopf.Memo, logger: kopf.Logger, **_: Any
) -> None:
    namespace = namespace_of(namespace)
    with connection(memo) as conn:
        retired = sql.retire(conn, name, namespace=namespace)
    # False: the name never reached PostgreSQL (it was always invalid): nothing to retire.
    logger.info(
        f"definition {qualified(namespace, name)} "
        + ("retired" if retired else "was never registered")
    )
