"""Logging, configured once per process: structlog, JSON when stderr is not a TTY.

Processes bind the ids they work on (``log.bind(run_id=…, step_id=…, attempt=…)``) so every
line of an attempt can be found by id; ``structlog.contextvars`` carries ids across awaits.
Tests use ``structlog.testing.capture_logs()``, which works whatever is configured here.
"""

from __future__ import annotations

import logging
import sys

import structlog

_configured = False


def configure(level: str = "info", *, json: bool | None = None) -> None:
    """Set up structlog for this process (idempotent: the first call wins)."""
    global _configured
    if _configured:
        return
    _configured = True
    as_json = (not sys.stderr.isatty()) if json is None else json
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info if as_json else structlog.dev.set_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
