"""One job attempt, from ``accepted`` to its single terminal event.

Stopping is two-stage, like a pod: a stop request (Cancel, client disconnect, deadline,
shutdown) first makes ``ctx.cancelled()`` true so the plugin can finish cleanly; after the
grace period the plugin is stopped hard (its task is cancelled; a sync plugin's thread
cannot be killed in Python, so it is abandoned as a daemon and its later reports dropped).
Either way the stop reason, not whatever the plugin did afterwards, picks the terminal event.

What the plugin writes (stdout, stderr, logging) is captured for this job alone, bounded and
masked like an in-process handler's (``rara.step_output``, in a copy of the context the plugin
runs in), and sent as ``JobLog`` events every ``LOG_PERIOD`` seconds or at 64 KiB, the rest
just before the terminal event; the worker stores it as the attempt's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import threading
from collections.abc import Awaitable, Callable
from contextvars import copy_context
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

import structlog

from rara.artifacts.media_type import media_type_problem
from rara.context import StepContext, StepOutcome
from rara.executor import limits
from rara.executor.context import ExecutorStepContext
from rara.executor.errors import error_from_exception
from rara.executor.outbox import Outbox
from rara.executor.plugins import RegisteredPlugin
from rara.executor.wire import JobSpec, credential_problem, dumps, ref_to_pb
from rara.step_output import StepOutput, capture, install
from rara.v1 import executor_pb2 as pb

log = structlog.get_logger(__name__)

LOG_PERIOD = 0.5  # seconds between JobLog batches while a plugin writes less than 64 KiB


class StopReason(enum.Enum):
    CANCEL = "cancel"
    DISCONNECT = "disconnect"
    DEADLINE = "deadline"
    SHUTDOWN = "shutdown"


def failed(
    code: pb.ErrorCode.ValueType, message: str, *, retryable: bool, seq: int = 0
) -> pb.ExecuteResponse:
    error = pb.Error(code=code, message=message, retryable=retryable)
    return pb.ExecuteResponse(seq=seq, failed=pb.JobFailed(error=error))


class RunningJob:
    def __init__(
        self, spec: JobSpec, plugin: RegisteredPlugin, store: Any, *, grace: float
    ) -> None:
        self.spec = spec
        self.outbox = Outbox()
        self._plugin = plugin
        self._grace = grace
        self._stop = asyncio.Event()
        self._reason: StopReason | None = None
        self._reason_text = ""
        self.ctx = ExecutorStepContext(spec, store, self.outbox, self._stop_asked)
        loop = asyncio.get_running_loop()
        self._log_due = asyncio.Event()
        self.output = StepOutput(
            on_full=lambda: loop.call_soon_threadsafe(self._log_due.set), marker=False
        )
        self.outcome: str | None = None  # the terminal event's kind, once it was put
        self.on_end: Callable[[], None] | None = None  # called just before the terminal event
        self.log = log.bind(
            idempotency_key=spec.idempotency_key, attempt=spec.attempt, capability=spec.capability
        )

    @property
    def plugin_capability(self) -> str:
        return self._plugin.capability

    def _send_logs(self, *, final: bool = False) -> None:
        chunks = self.output.take(final)
        self.output.confirm(len(chunks))  # the outbox keeps what it is given, in order
        for _, text, dropped in chunks:
            self.outbox.put(pb.ExecuteResponse(log=pb.JobLog(text=text, dropped=dropped)))

    async def _ship_logs(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(LOG_PERIOD):
                    await self._log_due.wait()
            self._log_due.clear()
            self._send_logs()

    def _finish(self, event: pb.ExecuteResponse) -> None:
        self._send_logs(final=True)  # the whole log before the verdict
        self.outcome = event.WhichOneof("event")
        if self.on_end is not None:
            self.on_end()  # the slot is free before anyone can hear the verdict
        self.outbox.put(event)

    def _stop_asked(self) -> bool:  # read from plugin threads: a plain attribute read
        return self._reason is not None

    def request_stop(self, reason: StopReason, text: str = "") -> None:
        """Ask the job to stop (loop thread). The first reason wins."""
        if self._reason is None:
            self._reason, self._reason_text = reason, text or reason.value
            self._stop.set()

    def _start_plugin(self) -> asyncio.Future[Any]:
        fn, ctx = self._plugin.fn, self.ctx
        install()  # (once per process)
        context = copy_context()  # the plugin's, where its output is this job's
        context.run(capture, self.output)
        loop = asyncio.get_running_loop()
        if self._plugin.is_async:
            return loop.create_task(_awaited(cast(Awaitable[Any], fn(ctx))), context=context)
        fut: asyncio.Future[Any] = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if not fut.done():  # cancelled by a hard stop: the result has no taker
                fut.set_result(value) if ok else fut.set_exception(value)

        def body() -> None:
            try:
                result: tuple[bool, Any] = (True, context.run(fn, ctx))
            except BaseException as exc:  # handed to the loop, which reports it
                result = (False, exc)
            with contextlib.suppress(RuntimeError):  # loop gone: an abandoned thread
                loop.call_soon_threadsafe(settle, *result)

        # A thread per job, not a shared pool: an abandoned thread must not eat a pool slot.
        name = f"plugin-{self._plugin.capability}-{self.spec.idempotency_key}"
        threading.Thread(target=body, name=name, daemon=True).start()
        return fut

    async def run(self) -> None:
        """Run the plugin and put every event, the terminal one last, into the outbox."""
        self.outbox.put(pb.ExecuteResponse(accepted=pb.JobAccepted()))
        self.outbox.put(pb.ExecuteResponse(running=pb.JobRunning()))
        plugin = self._start_plugin()
        plugin.add_done_callback(_retrieve)
        shipping = asyncio.ensure_future(self._ship_logs())
        stop = asyncio.ensure_future(self._stop.wait())
        timeout = None
        if self.spec.deadline is not None:
            timeout = max(0.0, (self.spec.deadline - datetime.now(UTC)).total_seconds())
        try:
            done, _ = await asyncio.wait(
                {plugin, stop}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if plugin in done:
                self._finish(self._outcome(plugin))
                return
            self.request_stop(StopReason.DEADLINE)  # no-op if another reason came first
            await asyncio.wait({plugin}, timeout=self._grace)
            if not plugin.done():
                self.log.warning("plugin ignored stop; stopping it hard", grace=self._grace)
                plugin.cancel()
            self._finish(self._stopped())
        except asyncio.CancelledError:
            plugin.cancel()
            self._finish(failed(pb.ERROR_CODE_UNAVAILABLE, "executor stopped", retryable=True))
            raise
        finally:
            stop.cancel()
            shipping.cancel()

    def _outcome(self, plugin: asyncio.Future[Any]) -> pb.ExecuteResponse:
        exc = plugin.exception()
        if exc is not None:
            self.log.info("plugin failed", error=repr(exc))
            return pb.ExecuteResponse(failed=pb.JobFailed(error=error_from_exception(exc)))
        outcome = plugin.result()
        if outcome is None:
            outcome = StepOutcome()
        if not isinstance(outcome, StepOutcome):
            return failed(
                pb.ERROR_CODE_HANDLER_ERROR,
                f"plugin returned {type(outcome).__name__}, expected StepOutcome",
                retryable=False,
            )
        try:
            result = dumps(outcome.result)
        except (TypeError, ValueError) as e:
            return failed(pb.ERROR_CODE_HANDLER_ERROR, f"result is not JSON: {e}", retryable=False)
        # The worker stores the result in PostgreSQL: a credential must not get there.
        if (problem := credential_problem(outcome.result, "the plugin's result")) is not None:
            return failed(pb.ERROR_CODE_HANDLER_ERROR, problem, retryable=False)
        if len(result) > limits.MAX_MESSAGE_BYTES - 64 * 1024:  # room for the manifest
            return failed(
                pb.ERROR_CODE_HANDLER_ERROR,
                "result: " + limits.describe(len(result)),
                retryable=False,
            )
        for art in outcome.artifacts:
            if (problem := media_type_problem(art.name, art.media_type)) is not None:
                return failed(pb.ERROR_CODE_HANDLER_ERROR, problem, retryable=False)
            if not self.ctx.artifacts.exists(art.ref):
                return failed(
                    pb.ERROR_CODE_HANDLER_ERROR,
                    f"artifact {art.name!r} ({art.ref.digest}) is not in the store",
                    retryable=False,
                )
        manifest = [ref_to_pb(a.ref, a.name) for a in outcome.artifacts]
        for entry, art in zip(manifest, outcome.artifacts, strict=True):
            entry.media_type = art.media_type
        reads = pb.ArtifactReads(digests=sorted(self.ctx.reads))
        return pb.ExecuteResponse(
            succeeded=pb.JobSucceeded(result_json=result, artifacts=manifest, reads=reads)
        )

    def _stopped(self) -> pb.ExecuteResponse:
        match self._reason:
            case StopReason.DEADLINE:
                return failed(
                    pb.ERROR_CODE_DEADLINE_EXCEEDED,
                    f"deadline {self.spec.deadline} passed",
                    retryable=True,
                )
            case StopReason.SHUTDOWN:
                return failed(
                    pb.ERROR_CODE_UNAVAILABLE, "executor is shutting down", retryable=True
                )
            case _:
                return pb.ExecuteResponse(cancelled=pb.JobCancelled(reason=self._reason_text))


async def _awaited(work: Awaitable[Any]) -> Any:
    return await work


def _retrieve(fut: asyncio.Future[Any]) -> None:
    # Mark a stopped plugin's exception as seen so asyncio does not log it at GC.
    if not fut.cancelled():
        fut.exception()


if TYPE_CHECKING:  # a static check that the context satisfies the shared protocol

    def _implements_protocol(ctx: ExecutorStepContext) -> StepContext:
        return ctx
