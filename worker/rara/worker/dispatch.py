"""Routing a leased step to what runs it: the ``Executor`` protocol.

A worker holds one executor per kind (``inprocess``, later ``grpc``). It leases a step only if
the executor of the step's kind serves the step's capability, so a worker without a gRPC
executor never takes ``executor: grpc`` steps. The executor runs the step's code and returns a
``StepOutcome`` or raises (``TerminalError`` → not retried, anything else → retried); the worker
owns everything around it: lease, heartbeats, deadlines, cancel and the final write.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

import psycopg
from psycopg.rows import RowMaker

from rara.artifacts.ref import ArtifactRef
from rara.context import Checkpoint, StepContext, StepOutcome
from rara.worker.registry import Registry

if TYPE_CHECKING:
    from psycopg._cursor_base import BaseCursor


@dataclass(frozen=True, slots=True)
class LeasedStep:
    """One attempt as leased: a row of ``step_lease``, whose columns are these fields' names
    (the row factory ``LEASED`` builds it from them)."""

    id: int
    run_id: int
    key: str
    capability: str
    executor: str
    payload: Mapping[str, Any]
    attempt: int
    max_attempts: int
    lease_token: UUID
    lease_expires_at: datetime
    timeout_ms: int | None
    heartbeat_timeout_ms: int | None
    depends_on: Sequence[str]
    run_input: Mapping[str, Any]
    leased_at: datetime  # database clock at lease time
    # Folded into the lease (no round trip at attempt start): what a retry resumes from, and
    # the upstream artifacts as ``"<step>/<name>"`` (and the bare name when unique).
    checkpoint: Checkpoint | None = None
    inputs: Mapping[str, ArtifactRef] = field(default_factory=dict)
    # Its lease key (-priority, available_at, id): where the worker's next lease scan of the
    # pair may start (rara.worker.lease_cursor).
    rank: int = 0
    available_at: datetime | None = None


# LeasedStep's fields up to leased_at: plain columns of step_lease, taken as they are.
_PLAIN = tuple(f.name for f in fields(LeasedStep))[:15]


def LEASED(cursor: BaseCursor[Any, Any]) -> RowMaker[LeasedStep]:
    """The row factory of step_lease: each row becomes a LeasedStep, its columns found by name
    once per result (a missing column is a KeyError naming it; an added one is ignored), then
    taken by a C getter: psycopg's kwargs_row cost three times as much per leased step."""
    description = cursor.description
    if description is None:
        raise psycopg.ProgrammingError("step_lease returned no rows to read")
    at = {column.name: i for i, column in enumerate(description)}
    plain = itemgetter(*(at[name] for name in _PLAIN))
    checkpoint, inputs, rank, available_at = (at["checkpoint"], at["inputs"], at["rank"],
                                              at["available_at"])

    def make(values: Sequence[Any]) -> LeasedStep:
        found = values[inputs]
        return LeasedStep(*plain(values),  # type: ignore[misc]  # the 15 fields up to leased_at
                          checkpoint=checkpoint_from_json(values[checkpoint]),
                          inputs=inputs_from_rows(found) if found else {},
                          rank=values[rank], available_at=values[available_at])

    return make


def checkpoint_from_json(value: Mapping[str, Any] | None) -> Checkpoint | None:
    if value is None:
        return None
    digest = value.get("digest")
    ref = ArtifactRef(digest, int(value["size"])) if digest is not None else None
    return Checkpoint(attempt=value["attempt"], seq=value["seq"], state=value["state"],
                      artifact=ref)


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


class Executor(Protocol):
    """What runs a step's code. ``kind`` is the definition's ``executor`` value it serves."""

    kind: str

    def capabilities(self) -> set[str]: ...

    async def run(self, ctx: StepContext, step: LeasedStep) -> StepOutcome: ...


def as_outcome(value: Any) -> StepOutcome:
    """A handler's return value: a StepOutcome, or a plain JSON value that is the result."""
    return value if isinstance(value, StepOutcome) else StepOutcome(result=value)


class InProcessExecutor:
    """Runs handlers from a registry in this process; sync handlers in a thread."""

    kind = "inprocess"

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def capabilities(self) -> set[str]:
        return self.registry.capabilities()

    async def run(self, ctx: StepContext, step: LeasedStep) -> StepOutcome:
        fn = self.registry.get(step.capability)
        if self.registry.is_async(step.capability):
            return as_outcome(await fn(ctx))
        return as_outcome(await run_in_daemon_thread(fn, ctx))


async def run_in_daemon_thread(fn: Callable[[StepContext], Any], ctx: StepContext) -> Any:
    """``asyncio.to_thread``, but in a daemon thread of its own.

    A thread cannot be interrupted: cancelling this await abandons the thread, which sees
    ctx.cancelled() and whose writes are fenced, so it can do no harm but waste. A daemon
    thread (not the loop's default executor, which ``asyncio.run`` joins at exit) lets the
    process exit after a graceful stop even if such a handler never returns.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            future.set_result(value) if ok else future.set_exception(value)

    def main() -> None:
        try:
            result = context.run(fn, ctx)
        except BaseException as exc:
            loop.call_soon_threadsafe(settle, False, exc)
        else:
            loop.call_soon_threadsafe(settle, True, result)

    threading.Thread(target=main, name=f"handler-{ctx.step_id}", daemon=True).start()
    return await future
