"""Immutable definition versions in PostgreSQL: same spec → same version, changed → N+1."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from rara.definitions.model import WorkflowDefinition
from rara.definitions.parse import canonical_spec, spec_digest
from rara.pg.queries import sync_queries
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
    q = sync_queries()
    for step in definition.spec.steps:
        refuse_credentials(step.input, f"step {step.key!r} input")
    digest = spec_digest(definition.spec)
    with conn.transaction():
        # Two appliers of one name must not both pick version N+1; the lock orders them and the
        # second one finds the first one's row by digest.
        q.definition_lock(conn, name=definition.name)
        q.definition_upsert_name(conn, name=definition.name)
        existing = q.definition_version_by_digest(conn, name=definition.name, digest=digest)
        if existing:
            return AppliedVersion(definition.name, existing[2], digest, created=False)
        row = q.definition_version_insert(
            conn, name=definition.name, digest=digest, spec=Jsonb(canonical_spec(definition.spec))
        )
        return AppliedVersion(definition.name, row[2], digest, created=True)
