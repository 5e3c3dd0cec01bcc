"""Secrets stay out of rara's state: steps name them (``secretRef``), never carry them.

- ``resolve`` turns a reference into its value inside the worker or executor, from a mounted
  Kubernetes Secret directory (``RARA_SECRETS_DIR/<name>/<key>``) or the environment
  (``RARA_SECRET_<NAME>[_<KEY>]``), and nowhere else.
- ``find_credentials`` spots values that look like credentials (private keys, cloud and token
  formats, ``password=…`` pairs); run input and step payloads holding one are refused.
- ``redact`` masks them in anything logged; ``redacting_processor`` does so for structlog.
- ``redact_output`` masks a step's captured output (its log): ``redact``, and first every
  secret value ``resolve`` returned in the step's context (``RESOLVED``, set by the worker
  around an in-process handler) and any other value the caller names (the lease token, the
  values of the secrets the step names: ``named_values``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from rara.errors import InputInvalid

# Patterns of well-known credential formats. Each is specific enough not to flag ordinary
# prose, ids or digests (a sha256 hex string is not a credential).
# Linear time matters as much: these run on every run input, job payload and log line, and
# an unbounded prefix such as the old URL scheme ``[a-z][a-z0-9+.-]*://`` rescanned the rest
# of the string from every letter, which is quadratic (a 20 kB string of letters took 2 s).
# Hence: a bounded URL scheme, and possessive ``{n,}+`` runs after fixed prefixes, so a start
# that fails costs at most the run it is in. tests/hardening/test_redaction.py times them.
_PATTERNS: dict[str, re.Pattern[str]] = {
    "private key": re.compile(r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----"),
    "AWS access key id": re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),
    "GitHub token": re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}+\b"),
    "Slack token": re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}+"),
    "OpenAI-style API key": re.compile(r"\bsk-[A-Za-z0-9_-]{20,}+"),
    "Hugging Face token": re.compile(r"\bhf_[A-Za-z0-9]{30,}+\b"),
    # The header segment is bounded (a JOSE header is short): "eyJ-eyJ-…" with no dot would
    # otherwise be scanned to its end from every "eyJ".
    "JSON web token": re.compile(
        r"\beyJ[A-Za-z0-9_-]{10,256}+\.eyJ[A-Za-z0-9_-]{10,}+\.[A-Za-z0-9_-]{10,}+"
    ),
    "password in URL": re.compile(r"\b[a-z][a-z0-9+.-]{0,31}://[^/\s:@]++:[^/\s@]++@"),
    "password assignment": re.compile(
        r"(?i)\b(password|passwd|secret|api[_-]?key|access[_-]?token)\s*+[=:]\s*+['\"]?[^\s'\"]{6,}"
    ),
}
# Keys whose value is sensitive whatever it looks like.
_SENSITIVE_KEYS = re.compile(
    r"(?i)^(password|passwd|secret|token|api[_-]?key|private[_-]?key|"
    r"access[_-]?key|client[_-]?secret|authorization)$"
)
MASK = "[REDACTED]"


# The secret values resolved in this context: a set while a step's output is captured (the
# worker sets it around an in-process handler: rara.step_output), else None. Mutated,
# never replaced, so a handler's threads (which run in a copy of its context) add to the set
# its capture reads.
RESOLVED: ContextVar[set[str] | None] = ContextVar("rara_resolved_secrets", default=None)

# A shorter value is not masked in a step's log: two or three characters would mask ordinary
# text everywhere they occur and hide nothing worth hiding.
MIN_MASKED_LENGTH = 4


class SecretNotFound(LookupError):
    pass


def resolve(
    name: str,
    key: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    secrets_dir: str | None = None,
) -> str:
    """The value of a secret reference; the error names the reference, never a value."""
    env = os.environ if env is None else env
    directory = secrets_dir or env.get("RARA_SECRETS_DIR")
    if directory:
        path = Path(directory) / name / (key or "value")
        if path.is_file():
            return _noted(path.read_text().rstrip("\n"))
    var = "RARA_SECRET_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()
    if key:
        var += "_" + re.sub(r"[^A-Za-z0-9]", "_", key).upper()
    if var in env:
        return _noted(env[var])
    where = f"{directory}/{name}/{key or 'value'} or " if directory else ""
    raise SecretNotFound(
        f"secret {name!r}{f' key {key!r}' if key else ''} not found ({where}${var})"
    )


def named_values(refs: Mapping[str, Any]) -> list[str]:
    """The values of the secrets a step names (its definition's ``secrets``: an alias → a
    ``{name, key}`` reference) that resolve here; one that does not is left out (the step
    may resolve it elsewhere, or never)."""
    values = []
    for ref in refs.values():
        if isinstance(ref, Mapping) and isinstance(ref.get("name"), str):
            try:
                values.append(resolve(ref["name"], ref.get("key")))
            except SecretNotFound:
                continue
    return values


def _noted(value: str) -> str:
    """``value``, remembered for the step's log to mask when a capture is on (``RESOLVED``)."""
    resolved = RESOLVED.get()
    if resolved is not None:
        resolved.add(value)
    return value


def find_credentials(value: Any, path: str = "$") -> Iterator[str]:
    """Paths (``$.a.b[2]``) of values that look like credentials, with what they look like."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            child = f"{path}.{k}"
            if isinstance(k, str) and _SENSITIVE_KEYS.match(k) and isinstance(v, str) and v:
                yield f"{child} (a {k!r} field)"
            else:
                yield from find_credentials(v, child)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from find_credentials(v, f"{path}[{i}]")
    elif isinstance(value, str):
        for what, pattern in _PATTERNS.items():
            if pattern.search(value):
                yield f"{path} (looks like a {what})"
                break


def refuse_credentials(value: Any, what: str) -> None:
    """Raise InputInvalid naming where a credential-looking value sits (not the value)."""
    found = list(find_credentials(value))
    if found:
        raise InputInvalid(
            f"{what} holds what looks like a secret at {', '.join(found)}; "
            "pass secrets by reference (secretRef) instead"
        )


# PostgreSQL's detail of a broken CHECK or NOT NULL constraint prints the failing row whole, to
# the end of its line: of rara_steps or rara_attempts, a lease token with it (the lease's own
# errors leave the row out: db/functions/lease.sql). Masked in every log line and CLI error.
_ROW_DUMP = re.compile(r"(?<=Failing row contains )\([^\n]*+")


# What each pattern cannot match without: a pattern runs only on text holding one of these
# (a substring test is ~100 times cheaper than a regex pass, and most text is a step's log
# lines holding none). The case-insensitive one is tested on ASCII text, casefolded; on other
# text it always runs (Unicode folding has more ways to spell a letter).
_HINTS: dict[str, tuple[str, ...]] = {
    "private key": ("PRIVATE KEY-----",),
    "AWS access key id": ("AKIA", "ASIA"),
    "GitHub token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    "Slack token": ("xox",),
    "OpenAI-style API key": ("sk-",),
    "Hugging Face token": ("hf_",),
    "JSON web token": ("eyJ",),
    "password in URL": ("://",),
}
_FOLDED_HINTS = ("password", "passwd", "secret", "api", "access")
_ROW_DUMP_HINT = "Failing row contains "


def _may_match(name: str, text: str, folded: str | None) -> bool:
    hints = _HINTS.get(name)
    if hints is not None:
        return any(h in text for h in hints)
    return folded is None or any(h in folded for h in _FOLDED_HINTS)


def redact(text: str) -> str:
    folded = text.casefold() if text.isascii() else None
    for name, pattern in _PATTERNS.items():
        if _may_match(name, text, folded):
            text = pattern.sub(MASK, text)
    if _ROW_DUMP_HINT not in text:
        return text
    return _ROW_DUMP.sub(f"({MASK}).", text)


def redact_output(text: str, values: Iterable[str] = ()) -> str:
    """A step's captured output as it is stored: each of ``values`` (the secrets it resolved,
    its lease token) of at least ``MIN_MASKED_LENGTH`` characters masked, longest first, then
    what ``redact`` masks."""
    for value in sorted(values, key=len, reverse=True):
        if len(value) >= MIN_MASKED_LENGTH and value in text:
            text = text.replace(value, MASK)
    return redact(text)


def redact_value(value: Any) -> Any:
    """A copy with credential-looking strings masked and sensitive keys' values replaced."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {
            k: MASK if isinstance(k, str) and _SENSITIVE_KEYS.match(k) else redact_value(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_value(v) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    # Any other object (an exception, a URL object, a dataclass) is rendered through str()
    # or repr() by the log renderer, which would print a credential inside it verbatim.
    text = str(value)
    masked = redact(text)
    return value if masked == text else masked


def redacting_processor(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> dict[str, Any]:
    """structlog processor: mask credential-looking values in every log line, including the
    value of a sensitive top-level key (``log.info("login", password=...)``)."""
    return dict(redact_value(event_dict))
