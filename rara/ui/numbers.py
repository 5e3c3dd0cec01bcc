"""Numbers as the dashboard shows them: the one home of its number formatting.

- A whole number is printed as one, with thousands separators: ``1154.0`` (JSON keeps no
  integer type apart) is ``1,154``.
- Any other number to ``DIGITS`` significant digits: ``0.42981451679458615`` is ``0.4298``;
  above ``10**DIGITS`` it is rounded to a whole number rather than padded with zeros
  (``12,346``, not ``12,350``); below ``10**-4`` in scientific notation (``3.2e-07``).
- A byte count in binary units to three significant digits: ``1102899`` is ``1.05 MiB``.
  A metric or result field is a byte count when its name, or the last part of it after a
  ``/`` or ``.``, is ``bytes`` or ends in ``_bytes``, ``-bytes`` or ``Bytes``
  (``index_bytes``, ``gpu/peak_bytes``, ``sizeBytes``): a name is all a step's numbers carry,
  and this is how they are usually spelled. ``kbytes`` or ``mib`` are numbers as written.
"""

from __future__ import annotations

import math
import re
from typing import Any

DIGITS = 4
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_BYTES = re.compile(r"(?i:(?:^|[/._\-])bytes)$|[a-z0-9]Bytes$")  # camelCase: case matters


def _plain(value: float) -> str:
    """A finite non-whole number to ``DIGITS`` significant digits, no exponent where avoidable."""
    size = abs(value)
    if size >= 10**DIGITS:
        return f"{round(value):,}"
    if size < 1e-4:
        mantissa, exponent = f"{value:.{DIGITS - 1}e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    decimals = max(DIGITS - 1 - math.floor(math.log10(size)), 0)
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def number(value: Any, signed: bool = False) -> str:
    """``value`` as the dashboard shows a number (module docstring); anything that is not a
    number as its text. ``signed``: a plus sign on a positive number (a difference)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("∞" if value > 0 else "−∞")
    if value == 0:
        return "0"
    if isinstance(value, int) or (value.is_integer() and abs(value) < 2**53):
        text = f"{int(value):,}"
    else:
        text = _plain(value)
    return "+" + text if signed and value > 0 else text


def size(value: Any) -> str:
    """A count of bytes in binary units: ``987 B``, ``12.3 KiB``, ``1.05 MiB``."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return str(value)
    if abs(value) < 1024:
        return f"{number(round(value))} B"
    amount = value / 1024
    for unit in _UNITS[1:]:
        # Below 999.5 so that three digits never round up to "1e+03".
        if abs(amount) < 999.5 or unit == _UNITS[-1]:
            break
        amount /= 1024
    return f"{amount:.3g} {unit}" if abs(amount) < 999.5 else f"{amount:,.0f} {unit}"


def is_byte_count(name: str) -> bool:
    """Whether a metric or field of this name counts bytes (module docstring)."""
    return bool(_BYTES.search(name))


def metric(name: str, value: Any) -> str:
    """A named number (a metric, a result's field): bytes when its name says so."""
    return size(value) if is_byte_count(name) else number(value)
