"""Conformance suite for any ExecutorService implementation, reached by address only.

``run_conformance("host:port", token)`` runs every check in ``conformance_checks``
against a live endpoint and returns a report; ``rara executor-conformance ADDRESS``
(``rara/cli/executor.py``) prints it. The endpoint must serve the plugins of
``rara.executor.conformance_plugins`` under the same names and behaviour, and nothing else
should use it meanwhile: some checks count the executor's active jobs.

Checks are pytest-style — plain ``assert`` with a message — so a failure reads the same in
the report as in a test run.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from rara.executor.client import ExecutorClient
from rara.v1 import executor_pb2 as pb

TERMINAL = ("succeeded", "failed", "cancelled")


class Skip(Exception):
    """Raised by a check that does not apply to this endpoint (e.g. auth is off)."""


@dataclass(slots=True)
class CheckResult:
    name: str
    outcome: str  # "passed" | "failed" | "skipped"
    detail: str = ""
    seconds: float = 0.0


@dataclass(slots=True)
class ConformanceReport:
    address: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.outcome != "failed" for r in self.results)

    def summary(self) -> str:
        lines = [f"{r.outcome.upper():7} {r.name} ({r.seconds:.2f}s)"
                 + (f": {r.detail}" if r.detail else "") for r in self.results]
        counts = {o: sum(r.outcome == o for r in self.results)
                  for o in ("passed", "failed", "skipped")}
        lines.append(f"{self.address}: " + ", ".join(f"{n} {o}" for o, n in counts.items()))
        return "\n".join(lines)


@dataclass(slots=True)
class Probe:
    """What a check gets: clients for the endpoint and helpers to drive jobs."""

    address: str
    token: str | None
    client: ExecutorClient
    client_kwargs: dict[str, Any]
    run_tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    def key(self, name: str) -> str:
        return f"conformance-{self.run_tag}-{name}"

    def other_client(self, token: str | None) -> ExecutorClient:
        return ExecutorClient(self.address, token=token, **self.client_kwargs)

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
        assert middle <= {"progress", "checkpoint"}, f"unexpected events mid-stream: {k}"


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


async def _run_one(
    name: str, check: Callable[[Probe], Awaitable[None]], probe: Probe, limit_s: float
) -> CheckResult:
    started = time.monotonic()
    try:
        async with asyncio.timeout(limit_s):
            await check(probe)
    except Skip as exc:
        return CheckResult(name, "skipped", str(exc), time.monotonic() - started)
    except TimeoutError:
        return CheckResult(name, "failed", f"no verdict within {limit_s}s",
                           time.monotonic() - started)
    except AssertionError as exc:
        return CheckResult(name, "failed", str(exc), time.monotonic() - started)
    except Exception as exc:
        detail = "".join(traceback.format_exception_only(exc)).strip()
        return CheckResult(name, "failed", detail, time.monotonic() - started)
    return CheckResult(name, "passed", "", time.monotonic() - started)


async def run_conformance_async(
    address: str, token: str | None, *, check_timeout: float = 60.0, **client_kwargs: Any
) -> ConformanceReport:
    """Run every check in order (they share the endpoint, so one at a time)."""
    from rara.executor.conformance_checks import CHECKS

    report = ConformanceReport(address)
    async with ExecutorClient(address, token=token, **client_kwargs) as client:
        probe = Probe(address, token, client, client_kwargs)
        for name, check in CHECKS:
            report.results.append(await _run_one(name, check, probe, check_timeout))
    return report


def run_conformance(address: str, token: str | None, **kwargs: Any) -> ConformanceReport:
    """Blocking form for the CLI: ``run_conformance(address, token) -> report``."""
    return asyncio.run(run_conformance_async(address, token, **kwargs))
