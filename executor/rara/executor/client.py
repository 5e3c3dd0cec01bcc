"""A small async client for ExecutorService (what the worker's gRPC adapter builds on).

The token travels as per-call metadata rather than channel call-credentials because gRPC
only attaches call-credentials to TLS channels, and a loopback sidecar may be plaintext.
The current trace context (``rara.tracing``) travels the same way, when OpenTelemetry is on.

A job over the wire limit (``limits.MAX_MESSAGE_BYTES``) is refused here, before it is sent,
with ``JobTooLarge``: a TerminalError, because the same job would be refused on every retry.

``execute(job)`` is one Execute call per job, or, once ``protocol = "session"`` (for an
executor whose GetCapabilities lists "session"), one job on the client's Session: a single
long-lived stream that carries every job of this client, opened on first use and reopened
after it broke. Either way the caller sees the same thing: the job's events, and
``grpc.aio.AioRpcError`` with the status Execute would have failed with (a per-job refusal
becomes its status; a broken session, the session's).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Literal, Self, TypeAlias

import grpc

from rara import tracing
from rara.errors import TerminalError
from rara.executor import limits
from rara.executor.outbox import TERMINAL_EVENTS
from rara.executor.wire import make_job
from rara.v1 import executor_pb2 as pb
from rara.v1 import executor_pb2_grpc as pb_grpc

__all__ = ["ExecutorClient", "ExecutorSession", "JobTooLarge", "make_job"]

Protocol = Literal["execute", "session"]

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


def _checked_size(job: pb.Job) -> int:
    """The job's size; JobTooLarge when the request carrying it would pass the wire limit
    (the job as field 1 of an ExecuteRequest: a tag byte and its length as a varint more,
    counted here rather than by building the request, which copies the job)."""
    size = job.ByteSize()
    framed = size + 1 + max(1, (size.bit_length() + 6) // 7)
    if framed > limits.MAX_MESSAGE_BYTES:
        raise JobTooLarge(f"job {job.idempotency_key!r}: " + limits.describe(framed))
    return size


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
        # "execute": a call per job; "session": jobs share self._session (see the docstring).
        self.protocol: Protocol = "execute"
        self._session: ExecutorSession | None = None

    async def get_capabilities(self, *, rpc_timeout: float = 10.0) -> pb.GetCapabilitiesResponse:
        response: pb.GetCapabilitiesResponse = await self._stub.GetCapabilities(
            pb.GetCapabilitiesRequest(), metadata=self._metadata, timeout=rpc_timeout
        )
        return response

    async def execute(
        self, job: pb.Job, *, rpc_timeout: float | None = None
    ) -> AsyncGenerator[pb.ExecuteResponse, None]:
        """The job's events. Stop iterating (or close the iterator) to cancel the job. Past
        ``rpc_timeout`` (by default the job's deadline and DEADLINE_SLACK_S) the job is
        cancelled and the iteration raises DEADLINE_EXCEEDED, on either protocol."""
        if rpc_timeout is None:
            rpc_timeout = _rpc_timeout(job)
        if self.protocol == "session":
            # A Session's call metadata is the stream's, not this job's: the job carries the
            # caller's trace context itself (in a copy: the caller may send it elsewhere).
            if carrier := tracing.outgoing_metadata():
                traced = pb.Job()
                traced.CopyFrom(job)
                traced.trace_context.update(dict(carrier))
                job = traced
            size = _checked_size(job)  # once: the session's writer batches by it too
            async with contextlib.aclosing(self.session().run(job, rpc_timeout, size)) as events:
                async for event in events:
                    yield event
            return
        _checked_size(job)
        metadata = self._metadata + tracing.outgoing_metadata()
        request = pb.ExecuteRequest(job=job)
        call: Any = self._stub.Execute(request, metadata=metadata, timeout=rpc_timeout)
        try:
            async for event in call:
                yield event
        finally:
            call.cancel()  # no-op after the stream ended; a disconnect before that

    def session(self) -> ExecutorSession:
        """The client's Session, opened now if none is open (or the last one broke)."""
        if self._session is None or self._session.ending:
            # Only the token: a session outlives the trace of the job that happened to open it.
            self._session = ExecutorSession(
                self._stub.Session(metadata=self._metadata), probe=self.get_capabilities
            )
        return self._session

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
        if self._session is not None:
            await self._session.close()
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


_Key = tuple[str, int]  # (idempotency_key, attempt): a job's identity on an executor


class _Expired:
    """Put in a job's queue when its rpc_timeout ran out."""


_Item: TypeAlias = pb.ExecuteResponse | grpc.aio.AioRpcError | _Expired  # a job queue's items


class ExecutorSession:
    """One Session call: jobs and cancels go out through one writer task (whatever waits is
    sent together, in one message), events come in through one reader task that hands each
    to its job's queue. The reader never waits on a job, so a job whose consumer is slow
    (writing a checkpoint, say) holds back no other job's events. When the call breaks,
    every job on it gets the call's error, and the client opens a new session for the next.
    """

    def __init__(self, call: Any, *, probe: Callable[[], Awaitable[Any]]) -> None:
        self._call = call
        self._probe = probe
        self._jobs: dict[_Key, asyncio.Queue[_Item]] = {}
        self._outgoing: list[tuple[pb.Job | pb.CancelRequest, int]] = []  # and a job's size
        self._wake = asyncio.Event()
        self.broken: grpc.aio.AioRpcError | None = None
        # The call ended and the reader is finding out why (``broken`` comes after awaits):
        # no job may join it meanwhile, since it would only get this call's error.
        self.ending = False
        self._writer = asyncio.create_task(self._write(), name="session-writer")
        self._reader = asyncio.create_task(self._read(), name="session-reader")

    @property
    def jobs(self) -> int:
        """Jobs on this session now (sent, no terminal event read yet)."""
        return len(self._jobs)

    async def run(
        self, job: pb.Job, rpc_timeout: float | None = None, size: int | None = None
    ) -> AsyncGenerator[pb.ExecuteResponse, None]:
        """One job's events, as Execute would stream them. Closing early cancels the job, and
        so does ``rpc_timeout`` running out (then DEADLINE_EXCEEDED is raised, as Execute's
        deadline would): the stream's deadline is the session's, not the job's. ``size``: the
        job's ByteSize when the caller has it."""
        key = (job.idempotency_key, job.attempt)
        if self.broken is not None:
            raise self.broken
        if key in self._jobs:
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.ALREADY_EXISTS,
                details=f"attempt {job.attempt} of {job.idempotency_key!r} is already on "
                "this session",
            )
        queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._jobs[key] = queue
        self._send(job, job.ByteSize() if size is None else size)
        ended = False
        # A timer, not a timeout around the waits: those would also run out while the caller
        # (not this generator) holds an event.
        expiry = (
            None
            if rpc_timeout is None
            else asyncio.get_running_loop().call_later(rpc_timeout, queue.put_nowait, _Expired())
        )
        try:
            while True:
                item = await queue.get()
                if isinstance(item, _Expired):
                    raise grpc.aio.AioRpcError(
                        grpc.StatusCode.DEADLINE_EXCEEDED, details="Deadline Exceeded"
                    )
                if isinstance(item, grpc.aio.AioRpcError):
                    ended = True
                    raise item
                if item.WhichOneof("event") in TERMINAL_EVENTS:
                    ended = True
                    yield item
                    return
                yield item
        finally:
            if expiry is not None:
                expiry.cancel()
            if self._jobs.get(key) is queue:
                del self._jobs[key]
            if not ended and self.broken is None:
                self._send(
                    pb.CancelRequest(
                        idempotency_key=key[0], attempt=key[1], reason="client gave up"
                    )
                )

    def _send(self, message: pb.Job | pb.CancelRequest, size: int = 0) -> None:
        self._outgoing.append((message, size))
        self._wake.set()

    async def _write(self) -> None:
        try:
            while True:
                await self._wake.wait()
                # One turn of the loop lets the jobs started meanwhile join this message (a
                # write costs ~45 µs here, as much as the rest of a job's client side).
                await asyncio.sleep(0)
                self._wake.clear()
                pending, self._outgoing = self._outgoing, []
                if not pending:
                    continue  # taken by the last turn, woken by a send just after it
                request = pb.SessionRequest()
                size = 0
                for message, n in pending:
                    if isinstance(message, pb.Job):
                        full = len(request.jobs) == limits.MAX_SESSION_JOBS_PER_MESSAGE
                        if full or (size and size + n > limits.MAX_MESSAGE_BYTES // 2):
                            await self._call.write(request)
                            request, size = pb.SessionRequest(), 0
                        request.jobs.append(message)
                        size += n
                    else:
                        request.cancels.append(message)
                await self._call.write(request)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            return  # the call ended: the reader reports why, to every job
        except Exception:
            # A bug here must not leave jobs waiting for events that will never come: end
            # the call, and the reader fails every job on it (CANCELLED).
            self._call.cancel()
            raise

    async def _read(self) -> None:
        error: grpc.aio.AioRpcError | None = None
        try:
            while True:
                response = await self._call.read()
                if response is grpc.aio.EOF:
                    break
                for tagged in response.events:
                    queue = self._jobs.get((tagged.idempotency_key, tagged.attempt))
                    if queue is None:
                        continue  # a job its caller gave up on: its late events have no taker
                    if tagged.HasField("refused"):
                        refused = tagged.refused
                        queue.put_nowait(
                            grpc.aio.AioRpcError(
                                _STATUS.get(refused.status_code, grpc.StatusCode.UNKNOWN),
                                details=refused.message,
                            )
                        )
                    else:
                        queue.put_nowait(tagged.event)
        except grpc.aio.AioRpcError as exc:
            self.ending = True
            error = await self._unmasked(exc)
        except asyncio.CancelledError:
            error = grpc.aio.AioRpcError(grpc.StatusCode.CANCELLED, details="session closed")
            raise
        finally:
            self.ending = True
            if error is None:
                code = await self._call.code()
                error = grpc.aio.AioRpcError(
                    grpc.StatusCode.UNAVAILABLE if code == grpc.StatusCode.OK else code,
                    details=f"executor ended the session ({code.name})",
                )
            self.broken = error
            for queue in self._jobs.values():
                queue.put_nowait(error)
            self._writer.cancel()

    async def _unmasked(self, exc: grpc.aio.AioRpcError) -> grpc.aio.AioRpcError:
        """The executor's answer where gRPC hid it: a write that fails in gRPC core (the
        executor refused the call, say for its token, while a job was on the way) turns the
        call's status into INTERNAL "Internal error from Core". A unary call gets the answer
        itself (UNAUTHENTICATED, UNAVAILABLE); if that one succeeds, INTERNAL stands (a real
        INTERNAL from the executor costs this one call more)."""
        if exc.code() != grpc.StatusCode.INTERNAL:
            return exc
        try:
            await self._probe()
        except grpc.aio.AioRpcError as answer:
            return answer
        return exc

    async def close(self) -> None:
        """End the session: the executor stops whatever still runs on it."""
        self._call.cancel()
        for task in (self._reader, self._writer):
            task.cancel()
        await asyncio.gather(self._reader, self._writer, return_exceptions=True)


_STATUS = {code.value[0]: code for code in grpc.StatusCode}
