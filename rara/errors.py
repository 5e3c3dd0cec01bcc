"""rara's exceptions, one small tree:

RaraError
├── DefinitionInvalid        bad definition document (lists every problem)
├── InputInvalid             bad run input / argument (names the field)
├── NotFound                 a definition, version or run that does not exist
├── CapabilityUnavailable    no live worker serves a capability a run needs
└── StepError                raised by step code
    ├── RetryableError       retried with backoff until maxAttempts (the default for
    │                        any other exception a handler raises)
    └── TerminalError        never retried: the step fails for good

``ErrorCode``: the codes rara itself stores in a step's or an attempt's error (``error->>'code'``),
one enum for the SQL that writes some of them (a test holds db/queries to it), the worker and the
wire's ``rara.v1.ErrorCode`` (each wire value maps onto the member of its name). Step code may
raise its own codes as well (``TerminalError("…", code="BAD_INPUT")``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    # An exception of step code that named no code of its own.
    HANDLER_ERROR = "HANDLER_ERROR"
    # The worker stopped the attempt itself (retryable).
    TIMEOUT = "TIMEOUT"
    HEARTBEAT_TIMEOUT = "HEARTBEAT_TIMEOUT"
    # The handler's result was refused (terminal: a retry would return the same).
    RESULT_INVALID = "RESULT_INVALID"
    RESULT_TOO_LARGE = "RESULT_TOO_LARGE"
    # Written by SQL (db/functions/): LEASE_EXPIRED by rara_step_reap_expired; UPSTREAM_FAILED
    # by rara_step_cancel_dependants and rara_map_fail; CANCELLED by rara_step_cancel and
    # rara_run_cancel.
    LEASE_EXPIRED = "LEASE_EXPIRED"
    UPSTREAM_FAILED = "UPSTREAM_FAILED"
    CANCELLED = "CANCELLED"
    # Written by SQL for a map step (db/functions/maps.sql): its list is not one, is longer
    # than map_children (rara_limits()), or one of its children failed for good.
    MAP_NOT_A_LIST = "MAP_NOT_A_LIST"
    MAP_TOO_LARGE = "MAP_TOO_LARGE"
    MAP_CHILD_FAILED = "MAP_CHILD_FAILED"
    # Written by SQL for a wait or approval step (db/functions/waits.sql): no signal or no
    # decision by its deadline, or a person rejected it.
    WAIT_TIMED_OUT = "WAIT_TIMED_OUT"
    APPROVAL_TIMED_OUT = "APPROVAL_TIMED_OUT"
    REJECTED = "REJECTED"
    # The gRPC executor adapter: no executor, or the call failed (retryable). A gRPC status
    # without a member of its own is EXECUTOR_RPC_FAILED (``details.grpc_status`` names it).
    EXECUTOR_UNAVAILABLE = "EXECUTOR_UNAVAILABLE"
    EXECUTOR_CANCELLED = "EXECUTOR_CANCELLED"
    EXECUTOR_STREAM_BROKEN = "EXECUTOR_STREAM_BROKEN"
    EXECUTOR_DEADLINE_EXCEEDED = "EXECUTOR_DEADLINE_EXCEEDED"
    EXECUTOR_UNAUTHENTICATED = "EXECUTOR_UNAUTHENTICATED"
    EXECUTOR_PERMISSION_DENIED = "EXECUTOR_PERMISSION_DENIED"
    EXECUTOR_RESOURCE_EXHAUSTED = "EXECUTOR_RESOURCE_EXHAUSTED"
    EXECUTOR_INTERNAL = "EXECUTOR_INTERNAL"
    EXECUTOR_UNKNOWN = "EXECUTOR_UNKNOWN"
    EXECUTOR_RPC_FAILED = "EXECUTOR_RPC_FAILED"
    # An executor's verdict: the wire's ErrorCode without its ERROR_CODE_ prefix
    # (CANCELLED and HANDLER_ERROR above are wire values too).
    UNSPECIFIED = "UNSPECIFIED"
    INTERNAL = "INTERNAL"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    UNKNOWN_CAPABILITY = "UNKNOWN_CAPABILITY"
    INCOMPATIBLE_VERSION = "INCOMPATIBLE_VERSION"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    UNAVAILABLE = "UNAVAILABLE"

    @classmethod
    def from_wire_name(cls, name: str) -> ErrorCode:
        """The member of a ``rara.v1.ErrorCode`` value's name (``ERROR_CODE_INTERNAL``)."""
        return cls(name.removeprefix("ERROR_CODE_"))

    @classmethod
    def of_rpc_status(cls, status: str) -> ErrorCode:
        """The code of a failed executor call, by its gRPC status name."""
        return cls.__members__.get(f"EXECUTOR_{status}", cls.EXECUTOR_RPC_FAILED)


class RaraError(Exception):
    """Base of every error rara raises on purpose."""


class DefinitionInvalid(RaraError, ValueError):
    what = "workflow definition"  # the document's kind, in the message's first line

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = list(problems)
        super().__init__(f"invalid {self.what}:\n  " + "\n  ".join(self.problems))


class ScheduleInvalid(DefinitionInvalid):
    """A WorkflowSchedule document that does not validate (rara.schedules.model)."""

    what = "workflow schedule"


class TriggerInvalid(DefinitionInvalid):
    """A WorkflowTrigger document that does not validate (rara.triggers.model)."""

    what = "workflow trigger"


class InputInvalid(RaraError, ValueError):
    pass


class NotFound(RaraError, LookupError):
    pass


class ResumeRefused(RaraError, ValueError):
    """A run cannot be resumed as asked (``rara runs retry --from-failure``)."""


class RunEnded(RaraError, ValueError):
    """A run that has ended cannot be paused or resumed (rara.pauses)."""


class CapabilityUnavailable(RaraError):
    def __init__(self, missing: Iterable[str]) -> None:
        self.missing = sorted(set(missing))
        super().__init__(
            "no live worker serves "
            + ", ".join(self.missing)
            # Said for both callers: the CLI (its flag) and Python (Client.start_run's argument).
            + " (start a worker or executor that does, or queue the run anyway:"
            " --queue-anyway, in Python queue_anyway=True)"
        )


class StepError(RaraError):
    """An error raised by step code, carried into the step's stored error."""

    retryable: bool = True
    code: str = ErrorCode.HANDLER_ERROR

    def __init__(
        self, message: str, *, code: str | None = None, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.details = dict(details or {})


class RetryableError(StepError):
    retryable = True


class TerminalError(StepError):
    retryable = False


class NotStarted(RetryableError):
    """The step's code never started: no executor took the job (none reachable when the
    worker called). The worker releases the lease instead of failing the attempt, so an
    executor's restart costs no retry; the step is ready again at once, for whichever worker
    can place it (this one stops leasing the capability until its executor answers again)."""

    code = ErrorCode.EXECUTOR_UNAVAILABLE


class WaitRefused(RaraError, ValueError):
    """A signal or an approval decision the run cannot take now (docs/waits.md): no step waits
    for it, the step is not waiting any more, or it was decided the other way."""


class WaitNotYet(WaitRefused):
    """The step it is for does not wait yet: its dependencies still run (a caller that keeps
    the signal or decision, as the operator does, tries again later)."""
