"""One attempt, from lease to its one final write.

The supervisor runs the executor in a task and watches it: the per-attempt deadline
(``timeout`` → TIMEOUT), the heartbeat timeout (no progress or checkpoint for that long →
HEARTBEAT_TIMEOUT), cancel (cooperative first: ``ctx.cancelled()`` turns true, then the task
is cancelled after a short grace), lost lease and shutdown. Then exactly one ending is written
through the attempt's ``AttemptIO`` (fenced, ``rara.worker.store``): successes, failures and
cancels by the worker's completion batcher (``rara.worker.batcher``: many attempts per
transaction, each fenced on its own, the write beyond the reach of a cancelled attempt), a
release on its own, shielded. Checkpoints the handler queued, its latest progress and the rest
of its log (``rara.step_output``) land first:

    handler returned        → complete (result + artifact manifest)
    handler raised          → fail (TerminalError: for good; anything else: retry)
    deadline / heartbeat    → fail, outcome timed_out, retryable
    cancel asked            → cancelled (whatever the handler did meanwhile)
    shutdown                → release (not a failure; back to ready at once)
    no executor took it     → release too (NotStarted: an executor's restart costs no retry)
    lease lost              → nothing: someone else owns the step now

``supervise`` returns what it wrote as an ``AttemptEnd``: the attempt's outcome (``rara.states``)
and the step's status after it, or why nothing was written (``Unwritten``; both types, like the
attempt's state, are ``rara.worker.vocabulary``'s).
"""

from __future__ import annotations

import asyncio
import json
import time
import traceback
from collections.abc import Set as AbstractSet
from functools import partial
from typing import Any

import structlog

from rara.artifacts.media_type import media_type_problem
from rara.context import StepContext, StepOutcome
from rara.errors import ErrorCode, NotStarted
from rara.states import AttemptOutcome, StepStatus
from rara.step_output import captured
from rara.worker import cache
from rara.worker.attempt_io import AttemptIO
from rara.worker.dispatch import Executor
from rara.worker.failures import error_json, is_retryable, timeout_json
from rara.worker.retry import persist
from rara.worker.vocabulary import (
    ABANDONED,
    LOST,
    AttemptEnd,
    AttemptState,
    Ending,
    LeaseLost,
    RemoteOutcome,
    StopReason,
)

log = structlog.get_logger("rara.worker")

_CANCEL_WAIT = 1.0  # how long a cancelled handler task may take to unwind before we move on

# A step's JSON result lives in its row; anything bigger belongs in the artifact store.
MAX_RESULT_BYTES = 1024 * 1024


def _next_stop(
    state: AttemptState, cancel_at: float | None, now: float
) -> tuple[StopReason | None, float | None]:
    """Why the handler must stop now (or None), and when to look again."""
    if state.stop_reason is not None:
        return state.stop_reason, None
    if state.lease_lost:
        return StopReason.LEASE_LOST, None
    if now >= state.lease_valid_until:
        # No heartbeat confirmed the lease in time (a hung or failing heartbeat): it may have
        # expired in the database and another worker may own the step now. Stop, as if lost.
        state.lease_lost = True
        return StopReason.LEASE_LOST, None
    # The lease horizon is a wake-up too, so a hung heartbeat cannot keep the handler running.
    checks: list[tuple[StopReason, float]] = [(StopReason.LEASE_HORIZON, state.lease_valid_until)]
    if state.deadline is not None:
        checks.append((StopReason.TIMEOUT, state.deadline))
    if state.step.heartbeat_timeout_ms is not None:
        silence = state.step.heartbeat_timeout_ms / 1000
        checks.append((StopReason.HEARTBEAT_TIMEOUT, state.last_report + silence))
    if cancel_at is not None:
        checks.append((StopReason.CANCEL, cancel_at))
    for reason, at in checks:
        if now >= at:
            return reason, None
    return None, min((at for _, at in checks), default=None)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def supervise(
    state: AttemptState, executor: Executor, ctx: StepContext, io: AttemptIO
) -> AttemptEnd:
    """Run the attempt to its end and write that end through ``io``. Returns what was
    written."""
    settings = io.settings
    step = state.step
    loop = state.loop
    # What the handler writes (or the executor relays: rara.worker.grpc_executor) is the
    # attempt's log.
    task = loop.create_task(captured(io.logs.output_for(state), lambda: executor.run(ctx, step)))
    cancel_at: float | None = None
    reason: StopReason | None = None
    while not task.done():
        now = time.monotonic()
        if state.cancel_requested and cancel_at is None:
            cancel_at = now + settings.cancel_grace_seconds
        reason, wake_at = _next_stop(state, cancel_at, now)
        if reason is not None:
            state.stop_reason = reason
            task.cancel()
            await asyncio.wait({task}, timeout=_CANCEL_WAIT)
            break
        if state.woken:  # poked since we last looked: look again
            state.woken = False
            continue
        # Sleep until the handler ends, a poke (cancel, lost lease, stop) or the next check.
        waiter: asyncio.Future[None] = loop.create_future()
        state.waiter = waiter
        done_cb = lambda _t, w=waiter: _resolve(w)  # noqa: E731
        task.add_done_callback(done_cb)
        timer = (
            None if wake_at is None else loop.call_later(max(0.0, wake_at - now), _resolve, waiter)
        )
        try:
            await waiter
        finally:
            state.waiter = None
            task.remove_done_callback(done_cb)
            if timer is not None:
                timer.cancel()
        state.woken = False
    # A hard stop (this task cancelled) cannot cut the final write in half: the ending is
    # written by the completion batcher's flush, one transaction that this task only waits
    # for, and a release runs shielded.
    try:
        return await _end(state, task, reason, io)
    finally:
        state.ended = True  # heartbeats leave it out from now on


def _bound(state: AttemptState) -> Any:
    """The attempt's logger, bound only when something is logged (not on the hot path)."""
    step = state.step
    return log.bind(
        run_id=step.run_id,
        step_id=step.id,
        step_key=step.key,
        attempt=step.attempt,
        capability=step.capability,
    )


async def _end(
    state: AttemptState, task: asyncio.Task[StepOutcome], reason: StopReason | None, io: AttemptIO
) -> AttemptEnd:
    exc: BaseException | None = None
    if not task.done():  # it ignored cancellation: leave it, but never let its error go unseen
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
    elif task.cancelled():
        if reason is None:  # cancelled from inside the handler: an ordinary, retryable error
            exc = RuntimeError("the handler's task was cancelled")
    else:
        exc = task.exception()
    if state.lease_lost or reason is StopReason.LEASE_LOST or isinstance(exc, LeaseLost):
        _bound(state).warning("lease lost; the attempt writes nothing more")
        return LOST
    if state.queued_checkpoints:  # saved on the loop thread: they land before the end
        results = await asyncio.gather(*state.queued_checkpoints, return_exceptions=True)
        if state.lease_lost:
            return LOST
        failed = next((r for r in results if isinstance(r, BaseException)), None)
        if exc is None and failed is not None:  # what a blocking save would have raised
            exc = failed
    settings = io.settings
    fence = state.fence
    run_id = state.step.run_id
    # The final write may wait out a database outage, but not forever: once the lease has
    # surely expired another worker owns the step and the fence would match nothing anyway.
    patience = max(settings.lease_seconds * 2, 10.0)
    # The latest progress and the rest of the log land before the end, each on a best effort:
    # the end matters more.
    if state.output is not None and exc is not None:  # why it failed, in its log too
        state.output.write("".join(traceback.format_exception(exc)))
    for what, due, write in (
        ("progress", state.pending_progress is not None, io.flush_progress),
        ("step log", state.output is not None and state.output.pending(), io.flush_logs),
    ):
        if not due:
            continue
        try:
            await persist(what, partial(write, state), give_up_after=patience)
        except Exception as error:
            _bound(state).warning(f"could not write the final {what}", error=str(error))
        if state.lease_lost:
            return LOST

    def ended(outcome: AttemptOutcome, **ending: Any) -> Ending:
        return Ending(fence, run_id, outcome, jitter=settings.jitter, **ending)

    # What to write, decided once (None: give the lease back); only the write is retried. Plain
    # code, not a coroutine per branch: the end is on every step's path.
    def decide() -> Ending | None:
        if reason is StopReason.SHUTDOWN or (reason is None and isinstance(exc, NotStarted)):
            return None
        if state.cancel_requested:
            return ended(AttemptOutcome.CANCELLED)
        if reason in (StopReason.TIMEOUT, StopReason.HEARTBEAT_TIMEOUT):
            code, what = (
                (ErrorCode.TIMEOUT, f"attempt exceeded its timeout of {state.step.timeout_ms} ms")
                if reason is StopReason.TIMEOUT
                else (
                    ErrorCode.HEARTBEAT_TIMEOUT,
                    f"no progress reported for {state.step.heartbeat_timeout_ms} ms",
                )
            )
            return ended(AttemptOutcome.TIMED_OUT, error=timeout_json(code, what), retryable=True)
        if exc is not None:
            return ended(AttemptOutcome.FAILED, error=error_json(exc), retryable=is_retryable(exc))
        outcome = task.result()
        if outcome.result is not None:
            try:
                encoded = json.dumps(outcome.result, allow_nan=False)
            except (TypeError, ValueError) as bad:
                error = {**error_json(bad), "code": ErrorCode.RESULT_INVALID, "retryable": False}
                return ended(AttemptOutcome.FAILED, error=error, retryable=False)
            if len(encoded) > MAX_RESULT_BYTES:
                # Retrying would produce the same result: a terminal failure naming the limit.
                error = {
                    "code": ErrorCode.RESULT_TOO_LARGE,
                    "retryable": False,
                    "type": "ResultTooLarge",
                    "message": f"result of step {state.step.key!r} is {len(encoded)} bytes "
                    f"of JSON; the limit is {MAX_RESULT_BYTES} — store large "
                    "outputs as artifacts (ctx.artifacts) and return their refs",
                }
                return ended(AttemptOutcome.FAILED, error=error, retryable=False)
        # Every manifest row, in-process or from an executor's report, passes here: a media
        # type the dashboard could not serve is refused for good, and nothing is written.
        problem = next(
            filter(None, (media_type_problem(a.name, a.media_type) for a in outcome.artifacts)),
            None,
        )
        if problem is not None:
            error = {
                "code": ErrorCode.RESULT_INVALID,
                "retryable": False,
                "type": "InvalidMediaType",
                "message": f"step {state.step.key!r}: {problem}",
            }
            return ended(AttemptOutcome.FAILED, error=error, retryable=False)
        manifest = [
            {"name": a.name, "digest": a.ref.digest, "size": a.ref.size, "media_type": a.media_type}
            for a in outcome.artifacts
        ]
        reads = sorted(_reads(state, outcome))
        return ended(
            AttemptOutcome.SUCCEEDED,
            result=outcome.result,
            artifacts=manifest,
            cache=None if state.cache_entry is None else cache.with_reads(state.cache_entry, reads),
            reads=reads,
        )

    async def release() -> AttemptEnd:
        released = await asyncio.shield(state.loop.create_task(io.release(state)))
        return AttemptEnd(AttemptOutcome.RELEASED, StepStatus.READY) if released else LOST

    try:
        ending = decide()
        if ending is None:
            end = await persist("attempt end", release, give_up_after=patience)
        else:
            status = await persist("attempt end", partial(io.end, ending), give_up_after=patience)
            end = LOST if status is None else AttemptEnd(ending.outcome, status)
    except Exception:
        _bound(state).exception("could not write the end of the attempt; its lease will expire")
        return ABANDONED
    if end is LOST:
        _bound(state).warning("lease lost before the attempt ended")
    elif exc is not None:
        _bound(state).info(
            "attempt failed",
            outcome=end.outcome,
            step=end.step,
            error=str(exc),
            error_type=type(exc).__name__,
        )
    return end


def _reads(state: AttemptState, outcome: StepOutcome) -> AbstractSet[str]:
    """What the attempt read, for lineage: an in-process handler's fetches through its context
    (noted as they return); a remote executor's as it reports them, or, from one that does not
    (older versions), the inputs it was handed (docs/artifacts.md, "Lineage")."""
    if state.step.executor == "inprocess":
        return state.reads
    if isinstance(outcome, RemoteOutcome) and outcome.reads is not None:
        return outcome.reads
    return {ref.digest for ref in state.step.inputs.values()}
