"""What a conformance check gets: a ``Probe`` of the endpoint, and the assertions every
check makes on an event stream. ``rara.executor.conformance_checks`` holds the checks;
``rara.executor.conformance`` runs them and reports.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from rara.executor.client import ExecutorClient, Protocol
from rara.v1 import executor_pb2 as pb

TERMINAL = ("succeeded", "failed", "cancelled")


class Skip(Exception):
    """Raised by a check that does not apply to this endpoint (e.g. auth is off)."""


@dataclass(slots=True)
class Probe:
    """What a check gets: clients for the endpoint and helpers to drive jobs."""

    address: str
    token: str | None
    client: ExecutorClient
    client_kwargs: dict[str, Any]
    protocol: Protocol = "execute"  # how jobs travel: an Execute call each, or a Session
    run_tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    def key(self, name: str) -> str:
        return f"conformance-{self.run_tag}-{name}"

    def other_client(self, token: str | None) -> ExecutorClient:
        client = ExecutorClient(self.address, token=token, **self.client_kwargs)
        client.protocol = self.protocol
        return client

    async def collect(self, job: pb.Job) -> list[pb.ExecuteResponse]:
        events = [e async for e in self.client.execute(job)]
        assert_well_formed(events)
        return events

    async def wait_active(self, predicate: Callable[[int], bool]) -> None:
        """Poll GetCapabilities.active_jobs until ``predicate`` holds (bounded by the
        check's timeout), backing off so the poll itself is not a load test."""
        delay = 0.01
        while not predicate((await self.client.get_capabilities()).active_jobs):
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)


def kinds(events: list[pb.ExecuteResponse]) -> list[str]:
    return [str(e.WhichOneof("event")) for e in events]


def assert_well_formed(events: list[pb.ExecuteResponse]) -> None:
    """Seq starts at 1 and strictly increases; one terminal event, last; lifecycle order."""
    assert events, "the stream ended without any event"
    seqs = [e.seq for e in events]
    assert seqs[0] == 1, f"first seq must be 1, got {seqs}"
    assert all(a < b for a, b in itertools.pairwise(seqs)), f"seq not increasing: {seqs}"
    k = kinds(events)
    assert sum(x in TERMINAL for x in k) == 1, f"need exactly one terminal event: {k}"
    assert k[-1] in TERMINAL, f"the terminal event must be last: {k}"
    if len(k) > 1:
        assert k[:2] == ["accepted", "running"], f"a started job opens accepted, running: {k}"
        middle = set(k[2:-1])
        # (log: what the plugin wrote, optional; an executor may send none.)
        assert middle <= {"progress", "checkpoint", "log"}, f"unexpected events mid-stream: {k}"


async def expect_status(
    call: Awaitable[Any], code: grpc.StatusCode, what: str
) -> grpc.aio.AioRpcError:
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        got = exc
    else:
        raise AssertionError(f"{what}: expected status {code.name}, the call succeeded")
    assert got.code() == code, f"{what}: expected {code.name}, got {got.code().name}"
    return got
