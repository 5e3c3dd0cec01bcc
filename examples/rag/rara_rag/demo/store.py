"""Where the demo keeps its artifacts: ``RARA_ARTIFACTS`` (a directory or ``s3://…``), else
``.rara/artifacts``; given to the worker and the executor alike.

S3 credentials stay where ``rara.artifacts`` reads them (``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY``, a credentials file, the machine's role): the children inherit the
environment, and the demo never reads, passes or prints them.
"""

from __future__ import annotations

from pathlib import Path

from rara.artifacts import open_store
from rara.artifacts.errors import ArtifactError
from rara.artifacts.location import ENV_VAR, S3Config, resolve

#: A digest no blob has: asking for it checks the store answers (bucket there, access given).
_PROBE = "sha256:" + "0" * 64


def location() -> str:
    """The store for this demo: ``$RARA_ARTIFACTS`` or ``.rara/artifacts``; a directory is made
    absolute, so every child process agrees on it wherever it runs."""
    where = resolve(None)
    return where if "://" in where else str(Path(where).resolve())


def describe(where: str) -> str:
    """The location as the demo prints it: the bucket, prefix and endpoint of an S3 store (its
    URL's parameters dropped, though they hold no secret), or the directory."""
    if not where.startswith("s3://"):
        return where
    cfg = S3Config.parse(where)
    return f"{cfg} at {cfg.endpoint}" if cfg.endpoint else str(cfg)


def check(where: str) -> str | None:
    """Why the store cannot be used (bad location, missing bucket, access denied, the ``s3``
    extra not installed), or None. One request on S3, before any process starts."""
    try:
        label = describe(where)
    except ValueError as exc:  # the message names the problem, never a credential
        return f"{ENV_VAR}: {exc}"
    try:
        open_store(where).exists(_PROBE)
    except (ValueError, RuntimeError, ArtifactError) as exc:
        return f"artifact store {label}: {exc}"
    return None
