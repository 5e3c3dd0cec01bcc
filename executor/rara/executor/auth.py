"""Who may call the executor: a bearer token, mutual TLS, or — on loopback only — nobody.

Running a plugin is remote code execution with the executor's GPUs and artifact store, so
the default is to refuse to start unauthenticated. ``--insecure-loopback`` lifts that only
for a loopback bind (a laptop, a sidecar in the same pod); asking for it on any other
address is an error rather than a warning, because warnings get ignored. For the same
reason a bearer token is refused off loopback without TLS: it is a password sent with every
call, and anyone on the path could read it and replay it.

A caller without the token is refused before its request is read (see
:class:`BearerTokenInterceptor`): it learns nothing else, not even the size limit.

The health service is exempt from the token: Kubernetes gRPC probes cannot send metadata,
and serving status reveals nothing.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

_EXEMPT_PREFIX = "/grpc.health.v1.Health/"


class InsecureConfigError(ValueError):
    """The executor's security settings are missing or contradictory; it will not start."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cert: Path
    key: Path
    client_ca: Path | None = None  # set: clients must present a certificate it signed


@dataclass(frozen=True, slots=True)
class AuthConfig:
    token: str | None = None
    tls: TlsFiles | None = None
    insecure_loopback: bool = False

    @property
    def authenticates(self) -> bool:
        return self.token is not None or (self.tls is not None and self.tls.client_ca is not None)


def read_token(path: str | Path) -> str:
    """The bearer token in a file (trailing newline ignored); refuses an empty one."""
    token = Path(path).read_text(encoding="utf-8").strip()
    if not token:
        raise InsecureConfigError(f"token file {path} is empty")
    return token


def is_loopback(listen: str) -> bool:
    """True for ``127.x.x.x:P``, ``[::1]:P`` and ``localhost:P``."""
    host = listen.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a hostname or "0.0.0.0"-style wildcard: assume reachable
        return False


def check(config: AuthConfig, listen: str) -> None:
    """Raise InsecureConfigError unless the settings are safe for ``listen``."""
    if config.token is not None and config.tls is None and not is_loopback(listen):
        raise InsecureConfigError(
            f"--token-file given with --listen {listen!r} and no --tls-cert: the bearer token "
            "would travel in clear text; serve TLS (--tls-cert/--tls-key) or listen on "
            "loopback (127.0.0.1, [::1], localhost)"
        )
    if config.authenticates:
        return
    if not config.insecure_loopback:
        raise InsecureConfigError(
            "refusing to start without authentication: give --token-file and/or "
            "--tls-cert/--tls-key/--tls-client-ca (mutual TLS); for local development only, "
            "bind to loopback and pass --insecure-loopback"
        )
    if not is_loopback(listen):
        raise InsecureConfigError(
            f"--insecure-loopback needs a loopback --listen address (127.0.0.1, [::1], "
            f"localhost), got {listen!r}: an unauthenticated executor must not be reachable "
            "from other hosts"
        )


def server_credentials(tls: TlsFiles) -> Any:
    client_ca = tls.client_ca.read_bytes() if tls.client_ca is not None else None
    return grpc.ssl_server_credentials(
        [(tls.key.read_bytes(), tls.cert.read_bytes())],
        root_certificates=client_ca,
        require_client_auth=client_ca is not None,
    )


async def _deny(requests: Any, context: Any) -> None:  # never reads the requests
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or invalid bearer token")


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Checks ``authorization: Bearer <token>`` on every call except health checks."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    def _authorized(self, metadata: Any) -> bool:
        for key, value in metadata or ():
            if key == "authorization":
                given = value.encode() if isinstance(value, str) else bytes(value)
                # compare_digest: the time taken must not reveal how much of a guess matched.
                return hmac.compare_digest(given, self._expected)
        return False

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(_EXEMPT_PREFIX):
            return handler
        if self._authorized(handler_call_details.invocation_metadata):
            return handler
        # Stream-request shape whatever the method's: gRPC reads a unary request before the
        # handler runs (and refuses an oversized one as RESOURCE_EXHAUSTED), while a stream
        # is read only when iterated, which _deny never does. The wire is the same either way.
        return grpc.stream_stream_rpc_method_handler(_deny)
