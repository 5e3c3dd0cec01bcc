"""A handler's exception as the JSON stored on the step and the attempt.

``{code, message, retryable, type, details, chain: [causes…], traceback}``: enough to debug
from ``rara runs show`` without the worker's logs, bounded so a huge message or a deep
recursion cannot bloat the hot table.
"""

from __future__ import annotations

import traceback
from typing import Any

from rara.errors import ErrorCode, StepError

MAX_MESSAGE = 2_000
MAX_TRACEBACK = 8_000
MAX_CHAIN = 5


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def is_retryable(exc: BaseException) -> bool:
    """TerminalError (and any StepError saying so) is final; every other exception retries."""
    return exc.retryable if isinstance(exc, StepError) else True


def error_json(exc: BaseException) -> dict[str, Any]:
    chain: list[dict[str, str]] = []
    cause = exc.__cause__ or exc.__context__
    while cause is not None and len(chain) < MAX_CHAIN:
        chain.append({"type": _type_name(cause), "message": str(cause)[:MAX_MESSAGE]})
        cause = cause.__cause__ or cause.__context__
    text = "".join(traceback.format_exception(exc))
    if len(text) > MAX_TRACEBACK:  # keep the end: the frame that raised is what matters
        text = "…" + text[-MAX_TRACEBACK:]
    return {
        "code": exc.code if isinstance(exc, StepError) else ErrorCode.HANDLER_ERROR,
        "message": (str(exc) or _type_name(exc))[:MAX_MESSAGE],
        "retryable": is_retryable(exc),
        "type": _type_name(exc),
        "details": dict(exc.details) if isinstance(exc, StepError) else {},
        "chain": chain,
        "traceback": text,
    }


def timeout_json(code: ErrorCode, message: str) -> dict[str, Any]:
    """The error of an attempt the worker stopped itself (TIMEOUT, HEARTBEAT_TIMEOUT)."""
    return {
        "code": code,
        "message": message,
        "retryable": True,
        "type": "timeout",
        "details": {},
        "chain": [],
        "traceback": "",
    }
