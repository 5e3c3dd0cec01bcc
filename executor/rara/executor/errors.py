"""Errors a job can end with, mapped onto the wire's structured ``Error``.

::

    JobError                 code + retryable + details; plugins may raise it
     └── IncompatibleJob     the job cannot run here; never retryable, raised before any work

Any other exception from a plugin becomes ``ERROR_CODE_HANDLER_ERROR``; it is retryable
unless it carries ``retryable = False`` (duck-typed, so a shared rara exception tree with
that attribute works without this module knowing it).
"""

from __future__ import annotations

from collections.abc import Mapping

from rara.secrets import redact, redact_value
from rara.v1 import executor_pb2 as pb


class JobError(Exception):
    """A failure with an explicit wire error code."""

    def __init__(
        self,
        message: str,
        *,
        code: pb.ErrorCode.ValueType = pb.ERROR_CODE_HANDLER_ERROR,
        retryable: bool = True,
        details: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.retryable = retryable
        self.details = dict(details or {})

    def to_proto(self) -> pb.Error:
        return pb.Error(
            code=self.code, message=self.message, retryable=self.retryable, details=self.details
        )


class IncompatibleJob(JobError):
    """Unknown capability, other major version or malformed job: retrying cannot help."""

    def __init__(
        self,
        message: str,
        *,
        code: pb.ErrorCode.ValueType = pb.ERROR_CODE_INVALID_ARGUMENT,
        details: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message, code=code, retryable=False, details=details)


def error_from_exception(exc: BaseException) -> pb.Error:
    """The structured error for whatever a plugin raised, credential-looking text masked:
    exception messages quote what failed (a connection URL, a header), and this one leaves
    the process to be stored and shown."""
    if isinstance(exc, JobError):
        error = exc.to_proto()
    else:
        retryable = getattr(exc, "retryable", True)
        error = pb.Error(
            code=pb.ERROR_CODE_HANDLER_ERROR,
            message=str(exc) or type(exc).__name__,
            retryable=retryable if isinstance(retryable, bool) else True,
            details={"exception": f"{type(exc).__module__}.{type(exc).__qualname__}"},
        )
    error.message = redact(error.message)
    masked = redact_value(dict(error.details))
    error.details.clear()
    error.details.update(masked)
    return error
