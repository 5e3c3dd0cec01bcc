"""The one rule for an artifact's media type, checked wherever a manifest is written.

A manifest's media type ends up as the ``Content-Type`` of the dashboard's downloads, in the
CLI's output and in the database: it must be a plain ``type/subtype`` with optional
``; name=value`` parameters, printable ASCII, at most 255 characters. A control character (a
CR/LF smuggled into a header) or an unbounded value is refused before anything is written.

The database enforces the same rule as a CHECK constraint on ``rara_step_artifacts``
(migration 0012, in PostgreSQL's spelling); tests/security/test_artifact_attacks.py runs that
constraint and this rule on the same values.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "MEDIA_TYPE_MAX_LENGTH",
    "MEDIA_TYPE_PATTERN",
    "is_valid_media_type",
    "media_type_problem",
]

MEDIA_TYPE_MAX_LENGTH: Final = 255
#: Python's spelling; ``[:cntrl:]`` of the SQL spelling is ``\x00-\x1f\x7f`` here, and its
#: ``[ -~]`` (printable ASCII) clause is :meth:`str.isascii` below.
MEDIA_TYPE_PATTERN: Final = (
    r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
    r'( *; *[A-Za-z0-9!#$&^_.+-]+=([A-Za-z0-9!#$&^_.+-]+|"[^"\\\x00-\x1f\x7f]*"))*$'
)
# fullmatch, not match: Python's ``$`` also matches before a final newline, PostgreSQL's not.
_MEDIA_TYPE = re.compile(MEDIA_TYPE_PATTERN)
_SHOWN = 80  # characters of a refused value quoted in the error


def is_valid_media_type(value: object) -> bool:
    """True if ``value`` may be stored (and served) as an artifact's media type."""
    return (
        isinstance(value, str)
        and len(value) <= MEDIA_TYPE_MAX_LENGTH
        and value.isascii()
        and _MEDIA_TYPE.fullmatch(value) is not None
    )


def media_type_problem(artifact: str, value: object) -> str | None:
    """Why artifact ``artifact``'s ``media_type`` may not be stored, or None if it may."""
    if is_valid_media_type(value):
        return None
    shown = repr(value)  # repr: a CR/LF shows as \r\n, never breaks the line it is logged on
    if len(shown) > _SHOWN:
        shown = shown[:_SHOWN] + f"… ({len(value) if isinstance(value, str) else '?'} chars)"
    return (
        f"artifact {artifact!r}: media_type {shown} is not a media type (type/subtype with "
        f"optional '; name=value' parameters, printable ASCII, at most "
        f"{MEDIA_TYPE_MAX_LENGTH} characters)"
    )
