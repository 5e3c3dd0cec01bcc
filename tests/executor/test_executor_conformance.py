"""The conformance suite passes against this implementation, by address only."""

from __future__ import annotations

from rara.executor.auth import AuthConfig
from rara.executor.conformance import CheckResult, run_conformance_async
from rara.executor.conformance_checks import CHECKS
from tests.executor.support import TOKEN, StartExecutor


def _failures(results: list[CheckResult]) -> list[str]:
    return [f"{r.name}: {r.detail}" for r in results if r.outcome == "failed"]


async def test_conformance_with_token(start_executor: StartExecutor) -> None:
    ex = await start_executor(cancel_grace=0.3)
    report = await run_conformance_async(ex.address, TOKEN, check_timeout=20)
    assert report.passed, report.summary()
    assert [r.name for r in report.results] == [name for name, _ in CHECKS]
    assert all(r.outcome == "passed" for r in report.results), report.summary()
    assert "15 passed, 0 failed, 0 skipped" in report.summary()


async def test_conformance_over_a_session(start_executor: StartExecutor) -> None:
    """Every check again, each job on one Session stream instead of an Execute call."""
    ex = await start_executor(cancel_grace=0.3)
    report = await run_conformance_async(ex.address, TOKEN, check_timeout=20, protocol="session")
    assert [r.name for r in report.results] == [name for name, _ in CHECKS]
    assert all(r.outcome == "passed" for r in report.results), report.summary()


async def test_conformance_without_auth_skips_the_auth_check(
    start_executor: StartExecutor,
) -> None:
    ex = await start_executor(
        auth_config=AuthConfig(insecure_loopback=True), token=None, cancel_grace=0.3
    )
    report = await run_conformance_async(ex.address, None, check_timeout=20)
    assert not _failures(report.results), report.summary()
    assert [r.name for r in report.results if r.outcome == "skipped"] == ["unauthenticated"]


async def test_conformance_reports_failures(start_executor: StartExecutor) -> None:
    # Against an executor with a different token every call fails: the report must say so
    # per check rather than raise.
    ex = await start_executor(cancel_grace=0.3)
    report = await run_conformance_async(ex.address, "not-the-token", check_timeout=5)
    assert not report.passed
    assert "UNAUTHENTICATED" in _failures(report.results)[0]
