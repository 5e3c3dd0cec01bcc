"""Immutable definition versions in PostgreSQL: same spec → same version, changed → N+1."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from rara.definitions.model import WorkflowDefinition
from rara.definitions.parse import canonical_spec, spec_digest
from rara.pg import definitions as sql
from rara.secrets import refuse_credentials


@dataclass(frozen=True)
class AppliedVersion:
    name: str
    version: int
    digest: str
    created: bool  # False: this exact spec already existed as `version`


def apply_definition(
    conn: psycopg.Connection[Any], definition: WorkflowDefinition
) -> AppliedVersion:
    """Register the definition's spec as a version (idempotent). One transaction."""
    for step in definition.spec.steps:
        refuse_credentials(step.input, f"step {step.key!r} input")
    digest = spec_digest(definition.spec)
    with conn.transaction():
        # Two appliers of one name must not both pick version N+1; the lock orders them and the
        # second one finds the first one's row by digest.
        sql.lock(conn, definition.name)
        sql.upsert(conn, definition.name)
        existing = sql.version_by_digest(conn, definition.name, digest)
        if existing is not None:
            return AppliedVersion(definition.name, existing.version, digest, created=False)
        row = sql.version_insert(conn, definition.name, digest, canonical_spec(definition.spec))
        return AppliedVersion(definition.name, row.version, digest, created=True)
