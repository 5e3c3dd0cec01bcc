"""Immutable definition versions in PostgreSQL: same spec → same version, changed → N+1."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from rara.definitions.model import WorkflowDefinition
from rara.definitions.parse import canonical_spec
from rara.errors import DefinitionInvalid
from rara.namespaces import DEFAULT_NAMESPACE
from rara.pg import definitions as sql
from rara.secrets import refuse_credentials


@dataclass(frozen=True)
class AppliedVersion:
    name: str
    version: int
    digest: str
    created: bool  # False: this exact spec already existed as `version`
    namespace: str = DEFAULT_NAMESPACE


def apply_definition(
    conn: psycopg.Connection[Any],
    definition: WorkflowDefinition,
    *,
    namespace: str = DEFAULT_NAMESPACE,
) -> AppliedVersion:
    """Register the definition's spec as a version of its name in ``namespace`` (idempotent;
    the caller has settled the namespace: rara.namespaces.document_namespace). One
    statement."""
    for step in definition.spec.steps:
        refuse_credentials(step.input, f"step {step.key!r} input")
    try:
        row = sql.register(
            conn, definition.name, canonical_spec(definition.spec), namespace=namespace
        )
    except psycopg.errors.ProgramLimitExceeded as exc:  # rara_limits: nothing was written
        raise DefinitionInvalid([exc.diag.message_primary or str(exc)]) from None
    return AppliedVersion(
        definition.name, row.version, row.digest, created=row.created, namespace=namespace
    )
