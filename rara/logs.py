"""Logging, configured once per process: structlog, JSON when stderr is not a TTY.

Processes bind the ids they work on (``log.bind(run_id=…, step_id=…, attempt=…)``) so every
line of an attempt can be found by id; ``structlog.contextvars`` carries ids across awaits.
Tests use ``structlog.testing.capture_logs()``, which works whatever is configured here.

Every line passes ``rara.secrets.redacting_processor`` just before it is rendered, so a
credential that slipped into an event, a bound id or an exception message is masked. That is
also why tracebacks are formatted to text (``format_exc_info``) in both modes: the console
renderer's own pretty tracebacks are drawn after the last processor, where nothing could
redact them.

Libraries that log through the standard library (kopf, the kubernetes client, psycopg_pool,
grpc) get the same treatment: ``configure`` puts one handler on the root logger whose
``structlog.stdlib.ProcessorFormatter`` runs the same chain, so their lines come out in the
same format, with the logger's name, and redacted. kopf's per-object reference
(``k8s_ref``: kind, namespace, name, uid) is kept as a field.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

from rara.secrets import redacting_processor

_configured = False


def processors(*, json: bool) -> list[structlog.types.Processor]:
    """The processor chain ``configure`` installs (public so tests can run it as is)."""
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    )
    return [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        redacting_processor,  # last before rendering: sees everything that will be written
        renderer,
    ]


def stdlib_formatter(*, json: bool) -> structlog.stdlib.ProcessorFormatter:
    """The formatter of standard-library records: the structlog chain, plus the logger's name
    and kopf's object reference."""
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_logger_name,
            structlog.stdlib.ExtraAdder(allow=["k8s_ref"]),
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *processors(json=json),
        ],
    )


def configure(level: str = "info", *, json: bool | None = None, file: TextIO | None = None) -> None:
    """Set up structlog and the standard library's root logger for this process (idempotent:
    the first call wins)."""
    global _configured
    if _configured:
        return
    _configured = True
    out = sys.stderr if file is None else file
    as_json = (not out.isatty()) if json is None else json
    number = logging.getLevelNamesMapping()[level.upper()]
    structlog.configure(
        processors=processors(json=as_json),
        wrapper_class=structlog.make_filtering_bound_logger(number),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(stdlib_formatter(json=as_json))
    root = logging.getLogger()
    root.handlers[:] = [handler]  # no second format beside this one (e.g. basicConfig's)
    root.setLevel(number)
