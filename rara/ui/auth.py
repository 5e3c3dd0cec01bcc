"""Who may act (cancel, retry) and how a form proves it came from our page.

Reading is open to whoever reaches the server (bind it to loopback, or put it behind your
proxy). Actions need all of: the server not read-only; an identity, either a bearer token
(``Authorization: Bearer …``, or the session cookie a browser gets by entering the token on
/login) or, when the server is told to trust one, a header an authenticating proxy sets
(``--auth-header X-Forwarded-User``); and a CSRF token bound to that identity in the form,
from a page of the same origin.

The session cookie and the CSRF tokens are HMACs keyed by the configured token (or a random
key per process when only the proxy header is trusted): neither reveals the token, and they
survive a restart of the server when a token is configured.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field

from starlette.requests import Request

SESSION_COOKIE = "rara_ui_session"


@dataclass(frozen=True)
class AuthConfig:
    read_only: bool = True
    token: str | None = None
    auth_header: str | None = None
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    def __post_init__(self) -> None:
        if self.token is not None:  # stable across restarts: derived from the token
            object.__setattr__(self, "key", hashlib.sha256(
                b"rara-ui-key\0" + self.token.encode()).digest())

    @property
    def can_login(self) -> bool:
        return self.token is not None

    def _mac(self, what: str) -> str:
        return hmac.new(self.key, what.encode(), hashlib.sha256).hexdigest()

    def session_value(self) -> str:
        return self._mac("session")

    def identity(self, request: Request) -> str | None:
        """The caller's identity, or None (anonymous: may read, may not act)."""
        if self.auth_header is not None:
            user = request.headers.get(self.auth_header, "").strip()
            if user:
                return f"user:{user}"
        if self.token is not None:
            bearer = request.headers.get("authorization", "")
            if bearer.lower().startswith("bearer ") and hmac.compare_digest(
                    bearer[7:].strip().encode(), self.token.encode()):
                return "token"
            cookie = request.cookies.get(SESSION_COOKIE, "")
            if cookie and hmac.compare_digest(cookie, self.session_value()):
                return "token"
        return None

    def check_token(self, candidate: str) -> bool:
        return self.token is not None and hmac.compare_digest(candidate.encode(),
                                                              self.token.encode())

    def may_act(self, request: Request) -> bool:
        return not self.read_only and self.identity(request) is not None

    def csrf_token(self, request: Request) -> str:
        who = self.identity(request)
        return "" if who is None else self._mac(f"csrf:{who}")

    def csrf_ok(self, request: Request, submitted: str) -> bool:
        """The form's token matches this caller, and the browser (when it says) posted from
        our own origin."""
        expected = self.csrf_token(request)
        if not expected or not hmac.compare_digest(submitted.encode(), expected.encode()):
            return False
        origin = request.headers.get("origin")
        if origin is not None and origin != "null":
            host = request.headers.get("host", "")
            return origin.split("://", 1)[-1] == host
        return True
