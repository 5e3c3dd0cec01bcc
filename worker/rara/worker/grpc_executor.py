"""The worker's gRPC executor adapter: steps with ``executor: grpc`` run in executor services.

The worker keeps its lease (heartbeats go on in the worker's loops) while it maps the job's
event stream onto persistent state: progress → coalesced progress writes, checkpoint → a fenced
checkpoint row, log → the attempt's log (its capture, as an in-process handler's output),
succeeded → result + artifact manifest + the blobs the job read (written by the
worker, fenced), failed → retryable or terminal by the executor's own verdict. Cancel, timeout
and lost leases reach the executor by cancelling the call (a client disconnect cancels the job)
and an explicit ``Cancel``. Transport failures: UNAVAILABLE before the job was accepted → the
next endpoint; a stream broken mid-job (executor killed) → a retryable failure, so the attempt
is retried and resumes from its last checkpoint.

Where an executor lists "session" in its capabilities' ``protocols`` (and ``sessions`` is on),
its jobs share one Session stream per endpoint instead of a call each
(``ExecutorClient.protocol``): the client routes each job's events to it and turns a per-job
refusal or a broken session into the status error an Execute call would have raised, so
everything below reads the same either way; leaving a job sends a cancel on the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import structlog

from rara.artifacts.ref import ArtifactRef
from rara.artifacts.store import parse_digest
from rara.context import OutputArtifact, StepContext, StepOutcome
from rara.errors import ErrorCode, NotStarted, RetryableError, StepError, TerminalError
from rara.executor.client import ExecutorClient, make_job
from rara.step_output import CURRENT
from rara.v1 import executor_pb2 as pb
from rara.worker.vocabulary import LeasedStep, RemoteOutcome

log = structlog.get_logger(__name__)

DOWN_REFRESH_SECONDS = 0.5  # asking a down loopback or in-cluster endpoint is a refused connect


@dataclass
class _Endpoint:
    address: str
    client: ExecutorClient
    capabilities: set[str] = field(default_factory=set)
    alive: bool = False
    version: str = ""  # the Capabilities RPC's executor_version


class GrpcExecutor:
    """Routes ``grpc`` steps to the endpoints that serve their capability (round robin)."""

    kind = "grpc"

    def __init__(
        self,
        endpoints: list[str],
        *,
        token: str | None,
        refresh_seconds: float = 10.0,
        sessions: bool = True,
    ) -> None:
        if not endpoints:
            raise ValueError("GrpcExecutor needs at least one endpoint")
        self._endpoints = [_Endpoint(a, ExecutorClient(a, token=token)) for a in endpoints]
        self._refresh_seconds = refresh_seconds
        self._sessions = sessions
        self._turn = itertools.count()
        self._changed = asyncio.Event()
        # Called when what the endpoints serve changes (describe()): the worker then tells the
        # database at once rather than at its next heartbeat (runs start only once it knows).
        self.on_change: Callable[[], None] | None = None
        self._described: list[dict[str, Any]] = self.describe()

    @classmethod
    def from_token_file(
        cls,
        endpoints: list[str],
        token_file: Path | None,
        refresh_seconds: float = 10.0,
        sessions: bool = True,
    ) -> GrpcExecutor:
        token = token_file.read_text().strip() if token_file is not None else None
        return cls(endpoints, token=token, refresh_seconds=refresh_seconds, sessions=sessions)

    def capabilities(self) -> set[str]:
        """What live endpoints serve now (the worker leases only these)."""
        return set().union(*(e.capabilities for e in self._endpoints if e.alive))

    def describe(self) -> list[dict[str, Any]]:
        """Each endpoint as the Fleet page shows it (rara_workers.executors): its address,
        what it serves, its version, whether it answers. Never the token."""
        return [
            {
                "endpoint": e.address,
                "capabilities": sorted(e.capabilities),
                "version": e.version,
                "live": e.alive,
            }
            for e in self._endpoints
        ]

    async def refresh(self) -> None:
        """Ask every endpoint what it serves; an endpoint that does not answer is not live.
        Compared with what was last announced, so that an endpoint ``run`` found down also
        counts as a change."""
        await self._ask_endpoints()
        now = self.describe()
        if now != self._described:
            self._described = now
            if self.on_change is not None:
                self.on_change()

    async def _ask_endpoints(self) -> None:
        for endpoint in self._endpoints:
            try:
                response = await endpoint.client.get_capabilities(rpc_timeout=3.0)
            except grpc.aio.AioRpcError as exc:
                if endpoint.alive:
                    log.warning(
                        "executor unreachable", endpoint=endpoint.address, code=exc.code().name
                    )
                endpoint.alive = False
                continue
            served = {f"{c.name}@{c.major}" for c in response.capabilities}
            if not endpoint.alive or served != endpoint.capabilities:
                log.info(
                    "executor capabilities", endpoint=endpoint.address, capabilities=sorted(served)
                )
            endpoint.capabilities, endpoint.alive = served, True
            endpoint.version = response.executor_version
            # An executor older than Session lists no protocols: Execute, a call per job.
            session = self._sessions and "session" in response.protocols
            endpoint.client.protocol = "session" if session else "execute"

    async def watch(self, stop: asyncio.Event) -> None:
        """Refresh periodically until ``stop``: at once after a failed call, every
        ``DOWN_REFRESH_SECONDS`` while an endpoint is down (so one that comes up is used
        within about a second), else every ``refresh_seconds``."""
        while not stop.is_set():
            await self.refresh()
            self._changed.clear()
            down = any(not e.alive for e in self._endpoints)
            period = (
                min(self._refresh_seconds, DOWN_REFRESH_SECONDS) if down else self._refresh_seconds
            )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(period):
                    await self._changed.wait()

    async def close(self) -> None:
        for endpoint in self._endpoints:
            await endpoint.client.close()

    def _candidates(self, capability: str) -> list[_Endpoint]:
        serving = [e for e in self._endpoints if e.alive and capability in e.capabilities]
        if not serving:
            return []
        start = next(self._turn) % len(serving)
        return serving[start:] + serving[:start]

    async def run(self, ctx: StepContext, step: LeasedStep) -> StepOutcome:
        job = make_job(
            capability=step.capability,
            idempotency_key=ctx.idempotency_key,
            payload=dict(ctx.input),
            attempt=ctx.attempt,
            run_id=ctx.run_id,
            step_id=ctx.step_id,
            step_key=ctx.step_key,
            inputs=dict(ctx.inputs),
            deadline=ctx.deadline,
            checkpoint=ctx.checkpoint,
        )
        for endpoint in self._candidates(step.capability):
            try:
                return await self._stream(endpoint, job, ctx)
            except _Unreachable as exc:
                endpoint.alive = False
                self._changed.set()
                log.warning(
                    "executor unavailable, trying the next",
                    endpoint=endpoint.address,
                    detail=str(exc),
                )
        raise NotStarted(f"no live executor serves {step.capability}")

    async def _stream(self, endpoint: _Endpoint, job: pb.Job, ctx: StepContext) -> StepOutcome:
        accepted = False
        try:
            # aclosing: leaving the job (any way) ends its call, or cancels it on the session,
            # now rather than when the generator is collected.
            async with contextlib.aclosing(endpoint.client.execute(job)) as events:
                async for event in events:
                    kind = event.WhichOneof("event")
                    if kind == "accepted":
                        accepted = True
                    elif kind == "progress":
                        p = event.progress
                        ctx.progress(
                            p.fraction if p.HasField("fraction") else None,
                            p.message,
                            dict(p.metrics),
                        )
                    elif kind == "log":  # into the attempt's log (rara.step_output)
                        output = CURRENT.get()
                        if output is not None:
                            output.relay(event.log.text, event.log.dropped)
                    elif kind == "checkpoint":
                        await _save_checkpoint(ctx, event.checkpoint)
                    elif kind == "succeeded":
                        return _outcome(event.succeeded, ctx.step_key)
                    elif kind == "failed":
                        raise _error(event.failed.error)
                    elif kind == "cancelled":
                        raise RetryableError(
                            f"executor cancelled the job: {event.cancelled.reason}",
                            code=ErrorCode.EXECUTOR_CANCELLED,
                        )
        except asyncio.CancelledError:
            # Cancel, timeout or a lost lease: leaving the job cancels it. On a Session that
            # is a cancel sent on the stream at once; an Execute call's disconnect may be
            # slow to reach the executor, so the explicit Cancel makes it prompt.
            if endpoint.client.protocol != "session":
                with contextlib.suppress(grpc.aio.AioRpcError, TimeoutError):
                    async with asyncio.timeout(2.0):
                        await endpoint.client.cancel(
                            job.idempotency_key, job.attempt, "worker stopped"
                        )
            raise
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.UNAVAILABLE and not accepted:
                raise _Unreachable(exc.details() or code.name) from exc
            raise RetryableError(
                f"executor {endpoint.address}: {code.name}: {exc.details()}",
                code=ErrorCode.of_rpc_status(code.name),
                details={"grpc_status": code.name},
            ) from exc
        raise RetryableError(
            f"executor {endpoint.address} ended the stream without a verdict",
            code=ErrorCode.EXECUTOR_STREAM_BROKEN,
        )


class _Unreachable(Exception):
    pass


async def _save_checkpoint(ctx: StepContext, checkpoint: pb.JobCheckpoint) -> None:
    state = json.loads(checkpoint.state_json or b"{}")
    artifact = _ref(checkpoint.artifact) if checkpoint.HasField("artifact") else None
    await ctx.asave_checkpoint(state, artifact)  # on the loop, written before the next event


def _outcome(succeeded: pb.JobSucceeded, step_key: str) -> RemoteOutcome:
    result: Any = json.loads(succeeded.result_json) if succeeded.result_json else None
    artifacts = [
        OutputArtifact(a.name, _ref(a), a.media_type or "application/octet-stream")
        for a in succeeded.artifacts
    ]
    reads = _reads(succeeded.reads, step_key) if succeeded.HasField("reads") else None
    return RemoteOutcome(result=result, artifacts=artifacts, reads=reads)


def _reads(reads: pb.ArtifactReads, step_key: str) -> frozenset[str]:
    """The digests the executor says the job read; a malformed one is the executor's bug,
    refused for good (lineage would name a blob that cannot exist)."""
    for digest in reads.digests:
        try:
            parse_digest(digest)
        except ValueError as exc:
            raise TerminalError(
                f"step {step_key!r}: the executor reported a read that is not a digest "
                f"(JobSucceeded.reads.digests): {exc}",
                code=ErrorCode.RESULT_INVALID,
            ) from exc
    return frozenset(reads.digests)


def _ref(ref: pb.ArtifactRef) -> ArtifactRef:
    return ArtifactRef(ref.digest, ref.size, ref.media_type or "application/octet-stream")


def _error(error: pb.Error) -> StepError:
    code = ErrorCode.from_wire_name(pb.ErrorCode.Name(error.code))
    kind = RetryableError if error.retryable else TerminalError
    return kind(error.message, code=code, details=dict(error.details))
