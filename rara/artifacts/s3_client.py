"""The S3 wire, one boundary: the minio client rara uses, and how its errors are read.

Credentials only by reference (the chain in :func:`make_client`; the order is in
:mod:`rara.artifacts.location`). The client never retries by itself: the store does, with
backoff, in one place (``S3ArtifactStore._call``), deciding with :func:`is_transient` and
:func:`is_access_error`.
"""

from __future__ import annotations

import os
from typing import Final

import certifi
import urllib3
from minio import Minio
from minio.credentials.providers import (
    AWSConfigProvider,
    ChainedProvider,
    EnvAWSProvider,
    IamAwsProvider,
)
from minio.error import InvalidResponseError, MinioException, S3Error, ServerError

from rara.artifacts.location import S3Config

__all__ = ["error_code", "is_access_error", "is_transient", "make_client"]

_TRANSIENT_CODES: Final = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestThrottled",
        "TooManyRequests",
        "RequestLimitExceeded",
        "RequestTimeout",
        "InternalError",
        "ServiceUnavailable",
        "OperationAborted",
        "ConditionalRequestConflict",
        "XMinioServerNotInitialized",
    }
)
_ACCESS_CODES: Final = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AllAccessDisabled",
        "InvalidToken",
        "ExpiredToken",
        "AccountProblem",
        "InvalidClientTokenId",
        "AuthorizationHeaderMalformed",
        "NoSuchBucket",
    }
)
_TRANSIENT_STATUS: Final = frozenset({408, 429, 500, 502, 503, 504})


def make_client(cfg: S3Config) -> Minio:
    """A minio client for ``cfg`` whose credentials come only by reference (module doc of
    :mod:`rara.artifacts.location`); retries are the store's."""
    endpoint = urllib3.util.parse_url(cfg.endpoint or "https://s3.amazonaws.com")
    http = urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=10, read=120),
        maxsize=max(10, cfg.concurrency + 2),
        cert_reqs="CERT_REQUIRED",
        ca_certs=os.environ.get("SSL_CERT_FILE") or certifi.where(),
        retries=False,  # one place retries, with backoff: S3ArtifactStore._call
    )
    credentials = ChainedProvider(
        [
            EnvAWSProvider(),
            AWSConfigProvider(filename=cfg.credentials_file, profile=cfg.profile),
            IamAwsProvider(),  # web identity token (IRSA), container credentials, instance role
        ]
    )
    return Minio(
        endpoint.netloc or "s3.amazonaws.com",
        secure=endpoint.scheme != "http",
        region=cfg.region,
        http_client=http,
        credentials=credentials,
    )


def status_of(exc: BaseException) -> int | None:
    if isinstance(exc, S3Error) and exc.response is not None:
        return int(exc.response.status)
    if isinstance(exc, ServerError):
        return exc.status_code
    if isinstance(exc, InvalidResponseError):  # minio 7.2.20 keeps the status only here
        return getattr(exc, "_code", None)
    return None


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError):
        return True  # refused, reset, timed out, cut mid-body
    if isinstance(exc, S3Error) and exc.code in _TRANSIENT_CODES:
        return True
    if isinstance(exc, InvalidResponseError) and status_of(exc) == 404:
        # A 404 whose body is not an S3 error document ("404 page not found", text/plain) is
        # not the store saying the key is absent: it is whatever answered before the server
        # was serving its buckets (seen for ~95 s after an S3 server's restart in the kind
        # chaos suite). Absence is NoSuchKey, an S3Error, and stays final.
        return True
    return isinstance(exc, MinioException) and status_of(exc) in _TRANSIENT_STATUS


def error_code(exc: BaseException) -> str | None:
    return exc.code if isinstance(exc, S3Error) else None


def is_access_error(exc: BaseException) -> bool:
    """Permanent: access denied, unknown or wrong credentials, no such bucket."""
    return error_code(exc) in _ACCESS_CODES or status_of(exc) == 403
