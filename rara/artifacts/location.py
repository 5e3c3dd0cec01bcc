"""Where the artifacts live: one setting, ``RARA_ARTIFACTS``, a directory or an ``s3://`` URL.

::

    RARA_ARTIFACTS=/shared/artifacts                       a directory (a RWX volume on k8s)
    RARA_ARTIFACTS=s3://bucket/some/prefix?region=eu-west-1
    RARA_ARTIFACTS=s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1

Query parameters of an ``s3://`` URL (all optional):

``endpoint``       S3-compatible server (MinIO, Ceph RGW, GCS, versitygw…); default AWS
``region``         default: asked of the server (one extra request per bucket)
``part_size``      multipart part size in MiB (default 8; grows so a blob fits 10,000 parts)
``concurrency``    parts uploaded at once (default 4); memory is about (this + 1) x part size
``retry_seconds``  how long one request is retried on throttling/transient errors (default
                   30): an outage of the store shorter than that costs retries, not the step's
                   attempt (a restarted S3 pod, a failover)
``attempts``       the most tries per request within that time (default 100)
``credentials_file`` / ``profile``   an AWS shared-credentials file (a mounted secret) and
                   its profile

Credentials are never part of the location: the URL refuses ``user:password@`` and key
parameters. They come by reference, in this order: ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` (/ ``AWS_SESSION_TOKEN``) in the environment, the shared-credentials
file (``credentials_file``, else ``AWS_SHARED_CREDENTIALS_FILE``, else ``~/.aws/credentials``),
then the pod's identity (web identity token, container or instance role).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl, urlsplit

ENV_VAR: Final = "RARA_ARTIFACTS"
DEFAULT_LOCATION: Final = ".rara/artifacts"
MIB: Final = 1 << 20
_SECRET_PARAMS = frozenset(
    {
        "access_key",
        "secret_key",
        "access_key_id",
        "secret_access_key",
        "session_token",
        "aws_access_key_id",
        "aws_secret_access_key",
        "password",
        "secret",
        "token",
    }
)


@dataclass(frozen=True)
class S3Config:
    """A parsed ``s3://`` location. Holds no secrets, so it may be logged."""

    bucket: str
    prefix: str = ""  # "" or ending in "/"
    endpoint: str | None = None  # scheme://host[:port]
    region: str | None = None
    part_size: int = 8 * MIB
    concurrency: int = 4
    attempts: int = 100
    retry_seconds: float = 30.0
    credentials_file: str | None = None
    profile: str | None = None

    @classmethod
    def parse(cls, url: str) -> S3Config:
        parts = urlsplit(url)
        if parts.scheme != "s3":
            raise ValueError(f"not an s3:// URL: {url!r}")
        if parts.username is not None or parts.password is not None:
            raise ValueError(
                "credentials do not belong in the artifact store URL; give them by reference "
                "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a credentials file, the pod's role)"
            )
        bucket = parts.hostname or ""
        if not bucket:
            raise ValueError(f"s3 URL needs a bucket: {url!r}")
        query = dict(parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False))
        if leaked := _SECRET_PARAMS & {k.lower() for k in query}:
            raise ValueError(
                f"credentials do not belong in the artifact store URL ({sorted(leaked)}); "
                "give them by reference (environment, credentials file, the pod's role)"
            )
        known = {
            "endpoint",
            "region",
            "part_size",
            "concurrency",
            "attempts",
            "retry_seconds",
            "credentials_file",
            "profile",
        }
        if unknown := set(query) - known:
            raise ValueError(f"unknown s3 URL parameters {sorted(unknown)}; known: {sorted(known)}")
        prefix = parts.path.strip("/")
        endpoint = query.get("endpoint") or None
        if endpoint is not None:
            ep = urlsplit(endpoint)
            if ep.scheme not in ("http", "https") or not ep.netloc or ep.username is not None:
                raise ValueError(f"endpoint must be http(s)://host[:port], got {endpoint!r}")
        cfg = cls(
            bucket=bucket,
            prefix=f"{prefix}/" if prefix else "",
            endpoint=endpoint,
            region=query.get("region") or None,
            part_size=int(query.get("part_size", "8")) * MIB,
            concurrency=int(query.get("concurrency", "4")),
            attempts=int(query.get("attempts", "100")),
            retry_seconds=float(query.get("retry_seconds", "30")),
            credentials_file=query.get("credentials_file") or None,
            profile=query.get("profile") or None,
        )
        if (
            cfg.part_size < 5 * MIB
            or cfg.concurrency < 1
            or cfg.attempts < 1
            or not cfg.retry_seconds >= 0
        ):
            raise ValueError(
                "s3 URL: part_size >= 5 (MiB), concurrency >= 1, attempts >= 1, retry_seconds >= 0"
            )
        return cfg

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def resolve(location: str | os.PathLike[str] | None = None) -> str:
    """The location to use: the given one, else ``$RARA_ARTIFACTS``, else ``.rara/artifacts``."""
    if location is not None and str(location):
        return os.fspath(location)
    return os.environ.get(ENV_VAR) or DEFAULT_LOCATION
