"""Conformance suite for any ExecutorService implementation, reached by address only.

``run_conformance("host:port", token)`` runs every check in ``conformance_checks``
against a live endpoint and returns a report; ``rara executor-conformance ADDRESS``
(``rara/cli/executor.py``) prints it. The endpoint must serve the plugins of
``rara.executor.conformance_plugins`` under the same names and behaviour, and nothing else
should use it meanwhile: some checks count the executor's active jobs.

``protocol="session"`` runs the same checks with every job on one Session stream (the
client's, ``ExecutorClient.protocol``) instead of an Execute call each: the per-job
semantics are the same, so the same checks hold; it needs the endpoint to list "session" in
GetCapabilities' ``protocols``.

Checks are pytest-style — plain ``assert`` with a message — so a failure reads the same in
the report as in a test run.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from rara.executor.client import ExecutorClient, Protocol
from rara.executor.conformance_checks import CHECKS
from rara.executor.conformance_probe import Probe, Skip


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
        lines = [
            f"{r.outcome.upper():7} {r.name} ({r.seconds:.2f}s)"
            + (f": {r.detail}" if r.detail else "")
            for r in self.results
        ]
        counts = {
            o: sum(r.outcome == o for r in self.results) for o in ("passed", "failed", "skipped")
        }
        lines.append(f"{self.address}: " + ", ".join(f"{n} {o}" for o, n in counts.items()))
        return "\n".join(lines)


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
        return CheckResult(
            name, "failed", f"no verdict within {limit_s}s", time.monotonic() - started
        )
    except AssertionError as exc:
        return CheckResult(name, "failed", str(exc), time.monotonic() - started)
    except Exception as exc:
        detail = "".join(traceback.format_exception_only(exc)).strip()
        return CheckResult(name, "failed", detail, time.monotonic() - started)
    return CheckResult(name, "passed", "", time.monotonic() - started)


async def run_conformance_async(
    address: str,
    token: str | None,
    *,
    check_timeout: float = 60.0,
    protocol: Protocol = "execute",
    **client_kwargs: Any,
) -> ConformanceReport:
    """Run every check in order (they share the endpoint, so one at a time)."""
    report = ConformanceReport(address)
    async with ExecutorClient(address, token=token, **client_kwargs) as client:
        client.protocol = protocol
        probe = Probe(address, token, client, client_kwargs, protocol)
        for name, check in CHECKS:
            report.results.append(await _run_one(name, check, probe, check_timeout))
    return report


def run_conformance(address: str, token: str | None, **kwargs: Any) -> ConformanceReport:
    """Blocking form for the CLI: ``run_conformance(address, token) -> report``."""
    return asyncio.run(run_conformance_async(address, token, **kwargs))
