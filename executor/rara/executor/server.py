"""The gRPC ExecutorService: admission, job bookkeeping and graceful shutdown.

Admission order for Execute, cheapest refusal first and never after work started:
no valid token -> UNAUTHENTICATED, before the request is read (auth.BearerTokenInterceptor);
draining -> UNAVAILABLE status; malformed or incompatible job (missing field, bad JSON,
credential-looking payload, unknown capability or major) -> a single non-retryable Failed
event naming the field; same attempt already running -> ALREADY_EXISTS; no free slot ->
RESOURCE_EXHAUSTED. Messages over ``limits.MAX_MESSAGE_BYTES`` from a caller with the token
never reach the handler: gRPC refuses them with RESOURCE_EXHAUSTED, naming both sizes.
A slot is held by the job, not the RPC, so a job still stopping after its client went
away keeps counting against the limit until it really ended: until its terminal event is put,
which frees the slot before the event can reach the worker (a worker that sends the next job
as soon as it heard the verdict, as on a Session, finds the slot free).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from typing import Any, cast

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from rara import metrics as m
from rara import tracing
from rara.context import ArtifactStoreAPI
from rara.executor import auth, limits
from rara.executor.errors import IncompatibleJob
from rara.executor.jobs import RunningJob, StopReason, failed
from rara.executor.plugins import PluginRegistry
from rara.executor.wire import decode_job
from rara.v1 import executor_pb2 as pb
from rara.v1 import executor_pb2_grpc as pb_grpc

log = structlog.get_logger(__name__)
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ExecutorService"].full_name


class ExecutorServicer(pb_grpc.ExecutorServiceServicer):
    def __init__(
        self,
        registry: PluginRegistry,
        store: ArtifactStoreAPI,
        *,
        max_concurrency: int,
        cancel_grace: float,
    ) -> None:
        self._registry = registry
        self._store = store
        self._max = max_concurrency
        self._cancel_grace = cancel_grace
        self._jobs: dict[tuple[str, int], RunningJob] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # Jobs holding a slot: from admission until their terminal event is put (not until
        # their task is collected), so that a worker that saw the verdict and sends the next
        # job at once finds the slot free.
        self._busy: set[RunningJob] = set()
        self._sessions: set[_Session] = set()
        self.draining = asyncio.Event()  # set once shutdown began; new jobs are refused

    async def GetCapabilities(
        self, request: pb.GetCapabilitiesRequest, context: Any
    ) -> pb.GetCapabilitiesResponse:
        return pb.GetCapabilitiesResponse(
            capabilities=[p.to_proto() for p in self._registry.plugins()],
            max_concurrency=self._max,
            active_jobs=len(self._busy),
            executor_version=f"rara-executor/{version('rara')}",
            protocols=["session"],
        )

    def _label(self, capability: str) -> str:
        # Only capabilities served here become label values (bounded cardinality).
        try:
            return self._registry.resolve(capability).capability
        except IncompatibleJob:
            return "unknown"

    async def Execute(
        self, request: pb.ExecuteRequest, context: Any
    ) -> AsyncIterator[pb.ExecuteResponse]:
        m.EXECUTOR_STREAMS.inc()
        try:
            # aclosing: a disconnect must reach the inner generator's finally at once (it
            # cancels the job), not whenever the garbage collector gets to it.
            async with contextlib.aclosing(self._execute(request, context)) as events:
                async for event in events:
                    yield event
        finally:
            m.EXECUTOR_STREAMS.dec()

    async def _execute(
        self, request: pb.ExecuteRequest, context: Any
    ) -> AsyncGenerator[pb.ExecuteResponse, None]:
        verdict = self._admission(request.job, context.invocation_metadata())
        if isinstance(verdict, _Refusal):
            await context.abort(verdict.code, verdict.message)
        if isinstance(verdict, pb.ExecuteResponse):
            yield verdict
            return
        job = cast(RunningJob, verdict)
        try:
            async for event in job.outbox.stream():
                yield event
        finally:
            # Client disconnect (this generator cancelled or closed early) cancels the job.
            if not job.outbox.terminal_sent:
                job.request_stop(StopReason.DISCONNECT, "client disconnected")

    def _admission(
        self, job_pb: pb.Job, metadata: Any
    ) -> RunningJob | pb.ExecuteResponse | _Refusal:
        """Execute's admission order (the module's docstring), shared with Session: the
        admitted job, the single event (seq 1) of a job that cannot run, or a refusal (a
        status)."""
        if self.draining.is_set():
            return _Refusal(grpc.StatusCode.UNAVAILABLE, "executor is shutting down")
        try:
            # Shape first (required fields, JSON, secrets), then whether it is served here.
            spec = decode_job(job_pb)
            plugin = self._registry.resolve(spec.capability)
        except IncompatibleJob as exc:
            log.info("job refused", capability=job_pb.capability, error=exc.message)
            m.EXECUTOR_JOBS.labels(self._label(job_pb.capability), "refused").inc()
            return pb.ExecuteResponse(seq=1, failed=pb.JobFailed(error=exc.to_proto()))
        if spec.deadline is not None and spec.deadline <= datetime.now(UTC):
            # Retryable, unlike the refusals above: the next attempt gets a fresh deadline.
            m.EXECUTOR_JOBS.labels(plugin.capability, "failed").inc()
            return failed(
                pb.ERROR_CODE_DEADLINE_EXCEEDED,
                f"deadline {spec.deadline} passed before the job started",
                retryable=True,
                seq=1,
            )
        if spec.key in self._jobs:
            return _Refusal(
                grpc.StatusCode.ALREADY_EXISTS,
                f"attempt {spec.attempt} of {spec.idempotency_key!r} is already running here",
            )
        if len(self._busy) >= self._max:
            return _Refusal(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"executor is full: {len(self._busy)} of {self._max} job slots busy; "
                "retry later or on another executor",
            )
        job = RunningJob(spec, plugin, self._store, grace=self._cancel_grace)
        self._admit(job, metadata)
        return job

    async def Session(
        self, request_iterator: AsyncIterator[pb.SessionRequest], context: Any
    ) -> AsyncIterator[pb.SessionResponse]:
        m.EXECUTOR_STREAMS.inc()
        session = _Session(self, context.invocation_metadata())
        if self.draining.is_set():
            session.drain()
        self._sessions.add(session)
        reader = asyncio.create_task(session.read(request_iterator), name="session-reader")
        try:
            async for response in session.responses(reader):
                yield response
            if session.refusal is not None:
                await context.abort(session.refusal.code, session.refusal.message)
        finally:
            m.EXECUTOR_STREAMS.dec()
            self._sessions.discard(session)
            reader.cancel()
            session.stop_all()
            session.close()

    def _admit(self, job: RunningJob, metadata: Any = None) -> None:
        spec = job.spec
        attributes: dict[str, str | int] = {
            "rara.capability": spec.capability,
            "rara.step_key": spec.step_key,
            "rara.run_id": spec.run_id,
            "rara.attempt": spec.attempt,
        }
        traced = tracing.traced(job.run(), "rara.executor.job", metadata, attributes)
        task = asyncio.create_task(traced, name=f"job-{spec.idempotency_key}")
        self._jobs[job.spec.key] = job
        self._tasks.add(task)
        self._busy.add(job)
        job.on_end = lambda: self._busy.discard(job)
        m.EXECUTOR_JOBS_RUNNING.set(len(self._tasks))
        started = time.monotonic()

        def forget(_: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            self._busy.discard(job)  # a task that ended without a verdict (a bug) frees it too
            if self._jobs.get(job.spec.key) is job:
                del self._jobs[job.spec.key]
            capability = job.plugin_capability
            m.EXECUTOR_JOBS_RUNNING.set(len(self._tasks))
            m.EXECUTOR_JOBS.labels(capability, job.outcome or "failed").inc()
            m.EXECUTOR_JOB_DURATION.labels(capability).observe(time.monotonic() - started)

        task.add_done_callback(forget)

    async def Cancel(self, request: pb.CancelRequest, context: Any) -> pb.CancelResponse:
        job = self._jobs.get((request.idempotency_key, request.attempt))
        if job is None:
            return pb.CancelResponse(found=False)
        job.request_stop(StopReason.CANCEL, request.reason or "cancel requested")
        return pb.CancelResponse(found=True)

    async def wait_idle(self) -> None:
        """Return once no job holds a slot (tests and shutdown wait on this)."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def drain(self, grace: float) -> None:
        """Refuse new jobs, let running ones finish for ``grace``, then stop the rest. A
        Session ends (OK) once no job is left on it, so an idle one holds nothing up."""
        self.draining.set()
        for session in self._sessions:
            session.drain()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace)
        for job in list(self._jobs.values()):
            job.request_stop(StopReason.SHUTDOWN)
        if self._tasks:
            # Each job hard-stops its plugin after cancel_grace; the margin is for the loop.
            await asyncio.wait(set(self._tasks), timeout=self._cancel_grace + 1.0)


@dataclass(frozen=True, slots=True)
class _Refusal:
    """A job not admitted: Execute fails its call with this status, Session refuses it."""

    code: grpc.StatusCode
    message: str


# A Session's batch: events that wait together go in one message, up to this many bytes
# (well under the wire limit; a single larger event, such as a big result, goes alone).
SESSION_BATCH_BYTES = 1024 * 1024
_WAKE = object()  # queued by a pump that ended: not an event
_DRAIN = object()  # queued when the executor drains: end once no job is left


@dataclass(frozen=True, slots=True)
class _Tag:
    """Which job a Session event is about: the job's identity, and its step for the log."""

    idempotency_key: str
    attempt: int
    step_id: int

    @property
    def key(self) -> tuple[str, int]:
        return (self.idempotency_key, self.attempt)

    def event(self, **body: Any) -> pb.SessionEvent:
        return pb.SessionEvent(
            idempotency_key=self.idempotency_key,
            attempt=self.attempt,
            step_id=self.step_id,
            **body,
        )


class _Session:
    """One Session stream: its jobs by (idempotency_key, attempt), a reader of the worker's
    requests, and one queue of tagged events that the handler writes in batches. Each job's
    outbox is pumped into that queue by its own task, so a job whose events are slow (a
    plugin blocked, progress spaced out) never holds back another's.

    The queue is bounded (``limits.SESSION_QUEUE_EVENTS`` events or ``SESSION_QUEUE_BYTES``,
    counting those being written): while it is full, pumps wait for room (their jobs' events
    wait in the outboxes) and the reader takes no further request, so a worker that stops
    reading answers meets gRPC flow control, not a growing executor."""

    def __init__(self, servicer: ExecutorServicer, metadata: Any) -> None:
        self._servicer = servicer
        self._metadata = metadata
        self._jobs: dict[tuple[str, int], RunningJob] = {}
        self._pumps: set[asyncio.Task[None]] = set()
        # An event with its size, or a marker (_WAKE, _DRAIN, None: the reader ended).
        self._events: asyncio.Queue[tuple[pb.SessionEvent, int] | object | None] = asyncio.Queue()
        self._held = 0  # events queued or being written
        self._bytes = 0  # their size
        self._pushers = 0  # pumps (or the reader) waiting for room
        self._reader_waits = False
        self._room = asyncio.Event()  # set when room is made and someone waits for it
        self._closed = False  # the stream is over: nothing will be written any more
        self.refusal: _Refusal | None = None  # the worker broke the contract: end with this

    def _full(self) -> bool:
        return (
            self._held >= limits.SESSION_QUEUE_EVENTS or self._bytes >= limits.SESSION_QUEUE_BYTES
        )

    async def _put(self, event: pb.SessionEvent) -> None:
        """Queue an event for the writer, waiting while the queue is full (an empty queue
        takes any event); dropped once the stream is over."""
        while self._held and self._full() and not self._closed:
            self._pushers += 1
            self._room.clear()
            try:
                await self._room.wait()
            finally:
                self._pushers -= 1
        if self._closed:
            return
        size = event.ByteSize()
        self._held += 1
        self._bytes += size
        self._events.put_nowait((event, size))

    async def _readable(self) -> None:
        """Wait until the reader may take the next request: the queue is below its bounds
        and no pump waits to put an event (they go first)."""
        while (self._full() or self._pushers) and not self._closed:
            self._reader_waits = True
            self._room.clear()
            try:
                await self._room.wait()
            finally:
                self._reader_waits = False

    def _written(self, n: int, size: int) -> None:
        """The writer handed ``n`` events of ``size`` bytes to gRPC: room for as many."""
        self._held -= n
        self._bytes -= size
        if (self._pushers or self._reader_waits) and not self._full():
            self._room.set()

    def close(self) -> None:
        """The stream is over: whoever waits for room stops waiting (and puts nothing)."""
        self._closed = True
        self._room.set()

    async def read(self, requests: AsyncIterator[pb.SessionRequest]) -> None:
        """Admit each job, stop each cancelled one; the stream's end (or break) is put as
        None, after which the writer stops once the jobs it holds have ended. A request with
        more than ``limits.MAX_SESSION_JOBS_PER_MESSAGE`` jobs ends the session (``refusal``)."""
        try:
            async for request in requests:
                if len(request.jobs) > limits.MAX_SESSION_JOBS_PER_MESSAGE:
                    self.refusal = _Refusal(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"a SessionRequest carries {len(request.jobs)} jobs; the limit is "
                        f"{limits.MAX_SESSION_JOBS_PER_MESSAGE} jobs per message (send the "
                        "rest in further messages)",
                    )
                    return
                for job_pb in request.jobs:
                    await self._start(job_pb)
                for cancel in request.cancels:
                    job = self._jobs.get((cancel.idempotency_key, cancel.attempt))
                    if job is not None:
                        job.request_stop(StopReason.CANCEL, cancel.reason or "cancel requested")
                # Backpressure: while the worker has not read what waits for it, read no more.
                await self._readable()
        finally:
            self._events.put_nowait(None)

    async def _start(self, job_pb: pb.Job) -> None:
        tag = _Tag(job_pb.idempotency_key, job_pb.attempt, job_pb.step_id)
        # The job's own trace context (Job.trace_context); the stream's metadata from a
        # client that sends none.
        trace = tuple(job_pb.trace_context.items()) or self._metadata
        verdict = self._servicer._admission(job_pb, trace)
        if isinstance(verdict, _Refusal):
            code = verdict.code.value[0]
            await self._put(
                tag.event(refused=pb.JobRefused(status_code=code, message=verdict.message))
            )
            return
        if isinstance(verdict, pb.ExecuteResponse):
            await self._put(tag.event(event=verdict))
            return
        job = verdict
        self._jobs[tag.key] = job
        pump = asyncio.create_task(self._pump(job, tag))
        self._pumps.add(pump)

    async def _pump(self, job: RunningJob, tag: _Tag) -> None:
        try:
            async for event in job.outbox.stream():
                await self._put(tag.event(event=event))
        finally:
            if self._jobs.get(tag.key) is job:
                del self._jobs[tag.key]
            self._pumps.discard(asyncio.current_task())  # type: ignore[arg-type,unused-ignore]
            self._events.put_nowait(_WAKE)  # the writer re-checks what is left to report

    async def responses(self, reader: asyncio.Task[None]) -> AsyncIterator[pb.SessionResponse]:
        """Batches of events until the worker's side ended and no job is left to report (or,
        at once, until the session is refused)."""
        reading = True
        held: tuple[pb.SessionEvent, int] | None = None  # the event that did not fit the last batch
        while reading or self._pumps or held is not None or not self._events.empty():
            item = held if held is not None else await self._events.get()
            held = None
            if self._events.empty():
                # One turn of the loop lets running jobs put what they have (a no-op job's
                # three events come in quick succession): one message for all of it.
                await asyncio.sleep(0)
            batch: list[pb.SessionEvent] = []
            size = 0
            while True:
                if item is None:
                    reading = False
                    self.stop_all("worker ended the session")
                    if self.refusal is not None:
                        return
                elif item is _DRAIN:
                    reading = False  # new jobs are refused meanwhile; running ones finish
                elif isinstance(item, tuple):
                    event, n = item
                    if batch and size + n > SESSION_BATCH_BYTES:
                        held = item  # a big event goes in a message of its own
                        break
                    batch.append(event)
                    size += n
                if self._events.empty():
                    break
                item = self._events.get_nowait()
            if batch:
                yield pb.SessionResponse(events=batch)
                self._written(len(batch), size)
        if reader.done() and not reader.cancelled() and (exc := reader.exception()) is not None:
            raise exc

    def drain(self) -> None:
        self._events.put_nowait(_DRAIN)

    def stop_all(self, text: str = "session ended") -> None:
        """The stream ended or broke: every job still on it stops, as on a disconnect."""
        for job in list(self._jobs.values()):
            if not job.outbox.terminal_sent:
                job.request_stop(StopReason.DISCONNECT, text)


class ExecutorServer:
    """A started-or-not gRPC server with the executor and health services on it."""

    def __init__(self, server: Any, servicer: ExecutorServicer, health_servicer: Any) -> None:
        self.grpc_server = server
        self.servicer = servicer
        self.health = health_servicer

    async def start(self) -> None:
        await self.grpc_server.start()
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def stop(self, grace: float) -> None:
        """Graceful: NOT_SERVING first (load balancers stop sending), drain, then stop."""
        started = time.monotonic()
        await self.health.enter_graceful_shutdown()
        await self.servicer.drain(grace)
        # What is left is flushing terminal events; give it at least a moment.
        await self.grpc_server.stop(max(0.5, grace - (time.monotonic() - started)))

    async def wait_for_termination(self) -> None:
        await self.grpc_server.wait_for_termination()


def create_server(
    registry: PluginRegistry,
    store: ArtifactStoreAPI,
    *,
    listen: str = "127.0.0.1:0",
    auth_config: auth.AuthConfig,
    max_concurrency: int = 16,
    cancel_grace: float = 5.0,
) -> tuple[ExecutorServer, int]:
    """Build (not start) the server; returns it and the bound port (``listen`` may say 0)."""
    auth.check(auth_config, listen)
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    interceptors = []
    if auth_config.token is not None:
        interceptors.append(auth.BearerTokenInterceptor(auth_config.token))
    server = grpc.aio.server(interceptors=interceptors, options=limits.GRPC_OPTIONS)
    servicer = ExecutorServicer(
        registry, store, max_concurrency=max_concurrency, cancel_grace=cancel_grace
    )
    pb_grpc.add_ExecutorServiceServicer_to_server(servicer, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if auth_config.tls is not None:
        port = server.add_secure_port(listen, auth.server_credentials(auth_config.tls))
    else:
        port = server.add_insecure_port(listen)
    return ExecutorServer(server, servicer, health_servicer), port
