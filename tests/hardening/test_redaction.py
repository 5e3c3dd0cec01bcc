"""Logs are redacted by the configured processor chain; the detectors run in linear time."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import structlog

from rara.logs import processors
from rara.runs import MAX_INPUT_BYTES
from rara.secrets import MASK, find_credentials, redact

TOKEN = "ghp_" + "Q7" * 18
DSN = "postgresql://app:hunter2hunter2@db:5432/rara"


def _render(json_mode: bool) -> structlog.BoundLogger:
    return structlog.wrap_logger(structlog.ReturnLogger(), processors=processors(json=json_mode))


@pytest.mark.parametrize("json_mode", [True, False])
def test_log_lines_are_redacted(json_mode: bool) -> None:
    log = _render(json_mode)
    line = log.info(
        "connecting",
        dsn=DSN,
        password="swordfish",
        headers={"token": "t0k"},
        note=f"using {TOKEN}",
        attempt=3,
    )
    for secret in ("hunter2", "swordfish", "t0k", TOKEN):
        assert secret not in line, (secret, line)
    assert MASK in line
    assert "connecting" in line
    assert "attempt" in line
    if json_mode:
        event = json.loads(line)
        assert event["password"] == MASK
        assert event["headers"] == {"token": MASK}
        assert event["attempt"] == 3, "numbers stay numbers"


@pytest.mark.parametrize("json_mode", [True, False])
def test_exception_text_is_redacted(json_mode: bool) -> None:
    log = _render(json_mode)
    try:
        raise ConnectionError(f"cannot connect to {DSN}")
    except ConnectionError:
        line = log.exception("lost the database")
    assert "ConnectionError" in line
    assert "hunter2" not in line


def test_a_configured_process_writes_redacted_json() -> None:
    code = (
        "import structlog; from rara import logs; logs.configure(json=True);"
        f"structlog.get_logger().warning('retrying', dsn={DSN!r}, api_key='k-123456789')"
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    event = json.loads(done.stderr.strip().splitlines()[-1])
    assert event["event"] == "retrying"
    assert event["level"] == "warning"
    assert "hunter2" not in done.stderr
    assert "k-123456789" not in done.stderr
    assert event["api_key"] == MASK


ADVERSARIAL = {
    "letters": "x" * MAX_INPUT_BYTES,  # the old URL pattern was quadratic on this
    "scheme-like": "ab+c." * (MAX_INPUT_BYTES // 5),
    "jwt-like": "eyJ-" * (MAX_INPUT_BYTES // 4),
    "sk-like": "sk-" * (MAX_INPUT_BYTES // 3),
    "url-like": "a://b:" + "c" * MAX_INPUT_BYTES,
    "spaces": " " * MAX_INPUT_BYTES,
    "assignments": "password " * (MAX_INPUT_BYTES // 9),
    "row dumps": "Failing row contains (" * (MAX_INPUT_BYTES // 22),
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_detection_is_linear_on_adversarial_input(name: str) -> None:
    text = ADVERSARIAL[name]
    started = time.perf_counter()
    list(find_credentials({"v": text}))
    redact(text)
    # Linear: ~0.1 s at this size on a slow machine; the quadratic patterns took minutes.
    assert time.perf_counter() - started < 5.0


@pytest.mark.parametrize(
    "value",
    [
        "postgresql://app:hunter2hunter2@db/x",
        "git+ssh://deploy:hunter2hunter2@example.org/repo",
        "jdbc:mysql://root:hunter2hunter2@db/x",
        "ghp_" + "a" * 36,
        "xoxb-" + "1" * 12 + "-abcdef",
        "sk-proj-" + "A1_-" * 10,
        "hf_" + "b" * 34,
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "AKIAIOSFODNN7EXAMPLE",
        "API_KEY=abcdef123456",
    ],
)
def test_the_linear_patterns_still_find_credentials(value: str) -> None:
    assert list(find_credentials(f"prefix {value} suffix")), value
    assert MASK in redact(value)


def test_a_failing_row_in_a_database_error_is_masked() -> None:
    """PostgreSQL prints a row that broke a constraint whole, a lease token with it."""
    token = "b01ebb0a-7110-435b-ade3-808001082235"
    text = (
        'new row for relation "rara_steps" violates check constraint "x"\n'
        f"DETAIL:  Failing row contains (1, 1, a, running, w1, {token}, null).\n"
        "CONTEXT:  SQL statement"
    )
    shown = redact(text)
    assert token not in shown
    assert f"DETAIL:  Failing row contains ({MASK}).\nCONTEXT:  SQL statement" in shown
