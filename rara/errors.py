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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class RaraError(Exception):
    """Base of every error rara raises on purpose."""


class DefinitionInvalid(RaraError, ValueError):
    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid workflow definition:\n  " + "\n  ".join(self.problems))


class InputInvalid(RaraError, ValueError):
    pass


class NotFound(RaraError, LookupError):
    pass


class CapabilityUnavailable(RaraError):
    def __init__(self, missing: Iterable[str]) -> None:
        self.missing = sorted(set(missing))
        super().__init__(
            "no live worker serves "
            + ", ".join(self.missing)
            + " (start a worker or executor that does, or pass --queue-anyway)"
        )


class StepError(RaraError):
    """An error raised by step code, carried into the step's stored error."""

    retryable: bool = True
    code: str = "HANDLER_ERROR"

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
