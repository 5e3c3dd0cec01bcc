"""Secrets by reference: credential-looking values refused in input, masked in logs."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from rara.errors import InputInvalid
from rara.runs import start_run, validate_input
from rara.secrets import SecretNotFound, find_credentials, redact, redact_value, resolve
from tests.support.definitions import apply

LOOKALIKES = [
    "-----BEGIN RSA PRIVATE KEY-----\nMIIE",
    "AKIAIOSFODNN7EXAMPLE",
    "ghp_" + "a" * 36,
    "sk-" + "b" * 40,
    "hf_" + "c" * 34,
    "postgresql://app:hunter2secret@db:5432/x",
    "password=correct-horse-battery",
]


@pytest.mark.parametrize("value", LOOKALIKES)
def test_credentials_in_run_input_are_refused(value: str) -> None:
    with pytest.raises(InputInvalid, match=r"\$\.config\.url .*secretRef") as info:
        validate_input({"config": {"url": value}})
    assert value not in str(info.value)


def test_sensitive_keys_and_ordinary_values() -> None:
    assert list(find_credentials({"token": "x"})) == ["$.token (a 'token' field)"]
    ordinary = {
        "digest": "sha256:" + "a" * 64,
        "query": "what is a decorator?",
        "k": 10,
        "url": "https://example.org/docs",
        "paths": ["/data/a.txt"],
    }
    assert list(find_credentials(ordinary)) == []


def test_redaction() -> None:
    line = "connecting to postgresql://app:hunter2secret@db/x with ghp_" + "z" * 36
    masked = redact(line)
    assert "hunter2secret" not in masked
    assert "ghp_" not in masked
    assert redact_value({"password": "p", "n": 1}) == {"password": "[REDACTED]", "n": 1}


def test_resolve_from_mounted_dir_then_env(tmp_path: Any) -> None:
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "token").write_text("from-file\n")
    assert resolve("hf", "token", env={}, secrets_dir=str(tmp_path)) == "from-file"
    assert resolve("db", env={"RARA_SECRET_DB": "from-env"}) == "from-env"
    with pytest.raises(SecretNotFound, match=r"secret 'missing' .*RARA_SECRET_MISSING"):
        resolve("missing", env={})


def test_definition_with_secret_in_static_input_writes_nothing(
    conn: psycopg.Connection[Any],
) -> None:
    with pytest.raises(InputInvalid, match="step 'a' input"):
        apply(conn, "s", [{"key": "a", "capability": "x@1", "input": {"api_key": "abcdefgh"}}])
    assert conn.execute("SELECT count(*) FROM rara_definition_versions").fetchone() == (0,)
    apply(
        conn,
        "s",
        [
            {
                "key": "a",
                "capability": "x@1",
                "secrets": {"HF_TOKEN": {"name": "hf", "key": "token"}},
            }
        ],
    )
    with pytest.raises(InputInvalid):
        start_run(conn, "s", input={"password": "letmein99"}, queue_anyway=True)


def test_redact_skips_only_patterns_that_cannot_match() -> None:
    """``redact`` runs a pattern only on text holding what it needs: the same answer as
    running every pattern, on text each pattern matches, in any case and in Unicode spellings
    case-insensitive matching accepts (the long s for s)."""
    from rara import secrets

    def every_pattern(text: str) -> str:
        for pattern in secrets._PATTERNS.values():
            text = pattern.sub(secrets.MASK, text)
        return secrets._ROW_DUMP.sub(f"({secrets.MASK}).", text)

    samples = [
        "-----BEGIN RSA PRIVATE KEY-----",
        "id AKIAABCDEFGHIJKLMNOP and ASIAABCDEFGHIJKLMNOP",
        "ghp_" + "a" * 36,
        "xoxb-1234567890-abc",
        "sk-" + "A" * 24,
        "hf_" + "b" * 32,
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlXzEyMw",
        "postgres://user:hunter2@db/x",
        "PASSWORD = 'abcdefgh'",
        "Api-Key: abcdefghij",
        "paſſword=abcdefghij",
        "ACCESS_TOKEN=abcdefghij",
        "new row violates: Failing row contains (1, tok)",
        "plain text with no credential, 12:00 INFO done\n" * 3,
        "",
    ]
    for text in samples:
        assert redact(text) == every_pattern(text), text
    assert redact("paſſword=abcdefghij") == "[REDACTED]"
