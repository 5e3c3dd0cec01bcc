"""Durations as written in definitions: ``500ms``, ``30s``, ``5m``, ``1h30m``, ``7d``.

A day is read (``7d``) but never written: the canonical spelling stays in hours, so a spec
stored before days were read keeps its digest."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(r"^(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+$")
_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(value: object) -> int:
    """Milliseconds from a duration string; a clear error for anything else."""
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError(f"must be a duration string such as '30s', '5m' or '1h30m', got {value!r}")
    text = value.strip()
    if not _WHOLE.match(text):
        raise ValueError(f"{value!r} is not a duration (use units ms, s, m, h, d: '30s', '5m')")
    total = sum(float(n) * _MS[unit] for n, unit in _PART.findall(text))
    if total <= 0:
        raise ValueError(f"duration {value!r} must be greater than zero")
    return round(total)


def format_duration_ms(ms: int) -> str:
    for unit in ("h", "m", "s"):
        if ms % _MS[unit] == 0:
            return f"{ms // _MS[unit]}{unit}"
    return f"{ms}ms"


DurationMs = Annotated[int, BeforeValidator(parse_duration_ms)]
