"""Releases (docs/releases.md): NAME@N is what a succeeded run published — its chosen
artifacts by digest and its steps' results — numbered per name from 1, never changed; NAME
(or NAME@current) is the release the name's pointer is at, moved by a promote or a rollback,
each move recorded. The rules are the database's (db/functions/releases.sql); this module
turns its refusals into rara's errors and fetches a release's blobs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

import psycopg

from rara.artifacts.api import ArtifactStore
from rara.errors import InputInvalid, NotFound
from rara.namespaces import qualified
from rara.pg import releases as release_sql
from rara.pg.releases import MoveRow, ReleaseArtifactRow, ReleaseSummary, RolledBack

__all__ = [
    "MoveRow",
    "Release",
    "ReleaseArtifactRow",
    "ReleaseSummary",
    "RolledBack",
    "fetch",
    "get_release",
    "list_releases",
    "parse_ref",
    "promote",
    "release_history",
    "rollback",
]

CURRENT = "current"
_REF = re.compile(r"^(?P<name>[^@]+)(?:@(?P<at>[^@]*))?$")


@dataclass(frozen=True)
class Release:
    namespace: str
    name: str
    number: int
    current: bool
    run_id: int
    definition: str
    definition_version: int
    results: dict[str, Any]
    artifacts: list[ReleaseArtifactRow]
    promoted_by: str
    promoted_at: datetime
    note: str | None

    @property
    def ref(self) -> str:
        return f"{qualified(self.namespace, self.name)}@{self.number}"

    def as_json(self) -> dict[str, Any]:
        """The release as JSON values (`rara releases get` prints it)."""
        found = asdict(self)
        found["promoted_at"] = self.promoted_at.isoformat()
        return found


def parse_ref(text: str) -> tuple[str, int | None]:
    """``NAME``, ``NAME@current`` (None: the current release) or ``NAME@N``."""
    match = _REF.match(text)
    if match is None:
        raise InputInvalid(f"release {text!r}: expected NAME, NAME@N or NAME@current")
    at = match["at"]
    if at is None or at == CURRENT:
        return match["name"], None
    if not at.isdigit() or int(at) < 1:
        raise InputInvalid(
            f"release {text!r}: {at!r} is no release number (1, 2, …) nor {CURRENT!r}"
        )
    return match["name"], int(at)


def _refusal(exc: psycopg.Error) -> Exception:
    """The database's refusal as rara's error: its message names what is wrong."""
    message = exc.diag.message_primary or str(exc)
    if exc.diag.message_hint:
        message += f" ({exc.diag.message_hint})"
    if isinstance(exc, psycopg.errors.NoDataFound):
        return NotFound(message)
    return InputInvalid(message)


def promote(
    conn: psycopg.Connection[Any],
    name: str,
    run_id: int,
    *,
    artifacts: Sequence[str] | None = None,
    results: Sequence[str] | None = None,
    note: str | None = None,
    namespace: str,
) -> Release:
    """Release run ``run_id`` (succeeded, of ``namespace``) as the next number of ``name`` and
    make it current. ``artifacts``: ``STEP/NAME`` selectors; ``results``: step keys; None:
    every artifact, every step's result (an empty list: none). Refused, naming what is wrong
    and writing nothing: a run that is missing or did not succeed, a selector it does not
    have."""
    try:
        with conn.transaction():
            number = release_sql.promote(
                conn, name, run_id, artifacts, results, note, namespace=namespace
            )
            return get_release(conn, name, number, namespace=namespace)
    except (psycopg.errors.NoDataFound, psycopg.errors.InvalidParameterValue) as exc:
        raise _refusal(exc) from None


def get_release(
    conn: psycopg.Connection[Any], name: str, number: int | None = None, *, namespace: str
) -> Release:
    """Release ``number`` of ``name`` (None: the current one); NotFound naming it."""
    row = release_sql.get(conn, name, number, namespace=namespace)
    if row is None:
        at = "" if number is None else f"@{number}"
        raise NotFound(f"no release {qualified(namespace, name)}{at}")
    return Release(
        namespace=row.namespace,
        name=row.name,
        number=row.number,
        current=row.current,
        run_id=row.run_id,
        definition=row.definition,
        definition_version=row.definition_version,
        results=row.results,
        artifacts=release_sql.artifacts(conn, row.id),
        promoted_by=row.promoted_by,
        promoted_at=row.promoted_at,
        note=row.note,
    )


def rollback(
    conn: psycopg.Connection[Any],
    name: str,
    to_number: int | None = None,
    *,
    reason: str | None = None,
    namespace: str,
) -> RolledBack:
    """Point ``name`` at release ``to_number`` (None: the release that was current when the
    current one was promoted); NotFound for no such release, InputInvalid for nothing to go
    back to."""
    if to_number is not None and to_number < 1:
        raise InputInvalid(f"--to {to_number}: release numbers start at 1")
    try:
        return release_sql.rollback(conn, name, to_number, reason, namespace=namespace)
    except (psycopg.errors.NoDataFound, psycopg.errors.InvalidParameterValue) as exc:
        raise _refusal(exc) from None


def list_releases(
    conn: psycopg.Connection[Any], name: str | None = None, *, namespace: str | None
) -> list[ReleaseSummary]:
    """The releases of ``namespace`` (None: every one readable), of ``name`` only unless
    None; newest first per name."""
    return release_sql.list_all(conn, name, namespace=namespace)


def release_history(conn: psycopg.Connection[Any], name: str, *, namespace: str) -> list[MoveRow]:
    """Every move of ``name``'s pointer, oldest first; NotFound when it has none."""
    moves = release_sql.moves(conn, name, namespace=namespace)
    if not moves:
        raise NotFound(f"no release {qualified(namespace, name)}")
    return moves


def _destination(root: Path, artifact: ReleaseArtifactRow) -> Path:
    """Where ``fetch`` writes an artifact: ROOT/STEP/NAME. A name may hold ``/`` (folders),
    never a part that leaves ROOT."""
    parts = PurePosixPath(artifact.step_key, artifact.name).parts
    if any(part in ("", ".", "..") for part in parts) or artifact.name.startswith("/"):
        raise InputInvalid(
            f"artifact {artifact.step_key}/{artifact.name}: its name would leave the folder"
        )
    return root.joinpath(*parts)


def fetch(release: Release, store: ArtifactStore, root: Path) -> list[Path]:
    """Every artifact of ``release`` from ``store`` into ``root``/STEP/NAME, each verified
    against its digest as it is written (a mismatch leaves no file: ArtifactCorrupted)."""
    targets = [(artifact, _destination(root, artifact)) for artifact in release.artifacts]
    written = []
    for artifact, path in targets:
        path.parent.mkdir(parents=True, exist_ok=True)
        store.get_file(artifact.digest, path)
        written.append(path)
    return written
