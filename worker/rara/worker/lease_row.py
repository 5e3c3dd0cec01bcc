"""The lease's row decoded: a row of ``step_lease`` (``rara.worker.store.lease``) as a
``LeasedStep``, with its checkpoint and upstream inputs folded in. Apart from the store only for
its size; the statement that returns these rows is ``store.lease``, and a column added there
is read here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import RowMaker

from rara.artifacts.ref import ArtifactRef
from rara.context import Checkpoint
from rara.worker.vocabulary import LeasedStep

if TYPE_CHECKING:
    from psycopg._cursor_base import BaseCursor

# LeasedStep's fields up to leased_at: plain columns of step_lease, taken as they are.
_PLAIN = tuple(f.name for f in fields(LeasedStep))[:15]


def LEASED(cursor: BaseCursor[Any, Any]) -> RowMaker[LeasedStep]:
    """The row factory of step_lease (``lease``; tests and benchmarks that lease by hand use it
    too): each row becomes a LeasedStep, its columns found by name once per result (a missing
    column is a KeyError naming it; an added one is ignored), then taken by a C getter:
    psycopg's kwargs_row cost three times as much per leased step."""
    description = cursor.description
    if description is None:
        raise psycopg.ProgrammingError("step_lease returned no rows to read")
    at = {column.name: i for i, column in enumerate(description)}
    plain = itemgetter(*(at[name] for name in _PLAIN))
    checkpoint, inputs, rank, available_at, namespace = (
        at["checkpoint"],
        at["inputs"],
        at["rank"],
        at["available_at"],
        at["namespace"],
    )

    def make(values: Sequence[Any]) -> LeasedStep:
        found = values[inputs]
        return LeasedStep(
            *plain(values),  # type: ignore[misc]  # the 15 fields up to leased_at
            checkpoint=checkpoint_from_json(values[checkpoint]),
            inputs=inputs_from_rows(found) if found else {},
            rank=values[rank],
            available_at=values[available_at],
            namespace=values[namespace],
        )

    return make


def checkpoint_from_json(value: Mapping[str, Any] | None) -> Checkpoint | None:
    if value is None:
        return None
    digest = value.get("digest")
    ref = ArtifactRef(digest, int(value["size"])) if digest is not None else None
    return Checkpoint(
        attempt=value["attempt"], seq=value["seq"], state=value["state"], artifact=ref
    )


def inputs_from_rows(rows: Iterable[Mapping[str, Any]]) -> dict[str, ArtifactRef]:
    """Upstream manifest entries ``{key, name, digest, size, media_type}`` as the inputs map:
    ``"<step>/<name>"`` for every artifact, and the bare name when it is unique."""
    found: dict[str, ArtifactRef] = {}
    bare: dict[str, list[ArtifactRef]] = {}
    for row in rows:
        name = row["name"]
        ref = ArtifactRef(row["digest"], int(row["size"]), row["media_type"])
        found[f"{row['key']}/{name}"] = ref
        bare.setdefault(name, []).append(ref)
    for name, refs in bare.items():
        if len(refs) == 1 and name not in found:
            found[name] = refs[0]
    return found
