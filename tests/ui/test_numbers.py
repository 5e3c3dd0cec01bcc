"""The dashboard's number formatting (rara.ui.numbers): significant digits, separators,
whole numbers whole, byte counts in binary units, recognised by their names."""

from __future__ import annotations

import pytest

from rara.ui.numbers import is_byte_count, metric, number, size


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0.42981451679458615, "0.4298"),
        (1154.0, "1,154"),  # JSON's 1154.0 is a count
        (1154, "1,154"),
        (1102899, "1,102,899"),  # a number, not bytes, without a name that says so
        (12345.678, "12,346"),  # whole above 10**4, not padded "12,350"
        (3.14159, "3.142"),
        (0.1 + 0.2, "0.3"),  # trailing zeros and float noise gone
        (-0.5, "-0.5"),
        (0.000000321, "3.21e-7"),
        (0, "0"),
        (-2.0, "-2"),
        (float("nan"), "NaN"),
        (float("inf"), "∞"),
        (True, "True"),  # not a number: as its text
        ("fast", "fast"),
    ],
)
def test_number(value: object, shown: str) -> None:
    assert number(value) == shown


def test_a_difference_is_signed() -> None:
    assert number(0.0312, signed=True) == "+0.0312"
    assert number(-0.0312, signed=True) == "-0.0312"
    assert number(0, signed=True) == "0"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0, "0 B"),
        (1023, "1,023 B"),
        (1024, "1 KiB"),
        (12600, "12.3 KiB"),
        (1102899, "1.05 MiB"),
        (1023 * 1024, "0.999 MiB"),  # never "1e+03 KiB"
        (5e9, "4.66 GiB"),
        (None, ""),
    ],
)
def test_size(value: object, shown: str) -> None:
    assert size(value) == shown


@pytest.mark.parametrize(
    ("name", "counts_bytes"),
    [
        ("bytes", True),
        ("index_bytes", True),
        ("gpu/peak_bytes", True),
        ("read-bytes", True),
        ("sizeBytes", True),
        ("SIZE_BYTES", True),
        ("kbytes", False),  # another unit: shown as written
        ("passages", False),
        ("bytes_per_s", False),  # a rate, not a count
    ],
)
def test_a_byte_count_is_known_by_its_name(name: str, counts_bytes: bool) -> None:
    assert is_byte_count(name) is counts_bytes


def test_metric_formats_by_name() -> None:
    assert metric("index_bytes", 1102899) == "1.05 MiB"
    assert metric("passages", 1102899.0) == "1,102,899"
