"""A small async client for ExecutorService (what the worker's gRPC adapter builds on).

The token travels as per-call metadata rather than channel call-credentials because gRPC
only attaches call-credentials to TLS channels, and a loopback sidecar may be plaintext.
The current trace context (``rara.tracing``) travels the same way, when OpenTelemetry is on.

A job over the wire limit (``limits.MAX_MESSAGE_BYTES``) is refused here, before it is sent,
with ``JobTooLarge``: a TerminalError, because the same job would be refused on every retry.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

import grpc

from rara import tracing
from rara.errors import TerminalError
from rara.executor import limits
from rara.executor.wire import make_job
from rara.v1 import executor_pb2 as pb
from rara.v1 import executor_pb2_grpc as pb_grpc

__all__ = ["ExecutorClient", "JobTooLarge", "make_job"]

# Parameters are named ``rpc_timeout`` (not ``timeout``): they become the gRPC deadline,
# which the server sees too, unlike a local ``asyncio.timeout``.

# Beyond the job's own deadline, how long to wait for the executor's DEADLINE_EXCEEDED
# event before giving up on the call ourselves.
DEADLINE_SLACK_S = 30.0


class JobTooLarge(TerminalError):
    code = "JOB_TOO_LARGE"


def _rpc_timeout(job: pb.Job) -> float | None:
    if not job.HasField("deadline"):
        return None
    try:
        deadline = job.deadline.ToDatetime(tzinfo=UTC)
    except (ValueError, OverflowError):  # out of range: the executor refuses it, by name
        return None
    return max(0.0, (deadline - datetime.now(UTC)).total_seconds()) + DEADLINE_SLACK_S


class ExecutorClient:
    def __init__(
        self,
        address: str,
        *,
        token: str | None = None,
        root_certificates: bytes | None = None,
        private_key: bytes | None = None,
        certificate_chain: bytes | None = None,
    ) -> None:
        if root_certificates is not None or certificate_chain is not None:
            creds = grpc.ssl_channel_credentials(root_certificates, private_key, certificate_chain)
            self._channel = grpc.aio.secure_channel(address, creds, options=limits.CLIENT_OPTIONS)
        else:
            self._channel = grpc.aio.insecure_channel(address, options=limits.CLIENT_OPTIONS)
        self._stub = pb_grpc.ExecutorServiceStub(self._channel)
        self._metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token is not None else ()
        )

    async def get_capabilities(self, *, rpc_timeout: float = 10.0) -> pb.GetCapabilitiesResponse:
        response: pb.GetCapabilitiesResponse = await self._stub.GetCapabilities(
            pb.GetCapabilitiesRequest(), metadata=self._metadata, timeout=rpc_timeout
        )
        return response

    async def execute(
        self, job: pb.Job, *, rpc_timeout: float | None = None
    ) -> AsyncGenerator[pb.ExecuteResponse, None]:
        """The job's events. Stop iterating (or close the iterator) to cancel the job."""
        request = pb.ExecuteRequest(job=job)
        if (size := request.ByteSize()) > limits.MAX_MESSAGE_BYTES:
            raise JobTooLarge(f"job {job.idempotency_key!r}: " + limits.describe(size))
        if rpc_timeout is None:
            rpc_timeout = _rpc_timeout(job)
        metadata = self._metadata + tracing.outgoing_metadata()
        call: Any = self._stub.Execute(request, metadata=metadata, timeout=rpc_timeout)
        try:
            async for event in call:
                yield event
        finally:
            call.cancel()  # no-op after the stream ended; a disconnect before that

    async def cancel(
        self, idempotency_key: str, attempt: int, reason: str = "", *, rpc_timeout: float = 10.0
    ) -> bool:
        """Ask the executor to stop that attempt; False when it was not running there."""
        request = pb.CancelRequest(idempotency_key=idempotency_key, attempt=attempt, reason=reason)
        response: pb.CancelResponse = await self._stub.Cancel(
            request, metadata=self._metadata, timeout=rpc_timeout
        )
        return response.found

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
