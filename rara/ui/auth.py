"""Who may act (cancel, retry) and how a form proves it came from our page.

Reading is open to whoever reaches the server (bind it to loopback, or put it behind your
proxy). Actions need all of: the server not read-only; an identity, either a bearer token
(``Authorization: Bearer …``, or the session cookie a browser gets by entering the token on
/login) or, when the server is told to trust one, a header an authenticating proxy sets
(``--auth-header X-Forwarded-User``); and a CSRF token bound to that identity in the form,
from a page of the same origin.

Each login gets a session of its own: a random id in the cookie, known to this process only
(``Sessions``), which forgets it at its lifetime's end (``--session-seconds``, 12 hours by
default), at logout, or when the process restarts; a cookie copied once stops working then.
The sessions live in the process's memory, not in a table, because the UI's database login may
only read (``rara_reader``; docs/least-privilege.md): so one process per dashboard (the chart
refuses ``ui.replicas`` above 1 with actions on). A form's CSRF token is an HMAC of the
identity (for a browser: of its session id), keyed by the configured token (or a random key per
process when only the proxy header is trusted): it reveals neither, and dies with the session.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only for annotations: `rara ui`'s options read SESSION_SECONDS from here,
    # and every `rara` command builds those options, so this module imports nothing heavy
    from starlette.requests import Request

SESSION_COOKIE = "rara_ui_session"
SESSION_SECONDS = 12 * 3600  # a working day: one login in the morning, none kept overnight
MAX_SESSIONS = 10_000  # only token holders make sessions; the bound is against a runaway script


class Sessions:
    """This process's logins: session id → when it ends and whose it is (a person's token's
    name, or "" for the shared token), on ``clock`` (monotonic: a wall-clock step neither
    revives nor kills a session). Every session lives the same ``seconds``, so the dict's
    order (insertion) is also expiry order: pruning takes from the front."""

    def __init__(
        self, seconds: float, clock: Callable[[], float] = time.monotonic, limit: int = MAX_SESSIONS
    ) -> None:
        if seconds <= 0:
            raise ValueError(f"the session lifetime must be positive, got {seconds} seconds")
        self.seconds = seconds
        self._clock = clock
        self._limit = limit
        self._ends: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._ends)

    def _prune(self, now: float) -> None:
        while self._ends:
            oldest, (ends, _) = next(iter(self._ends.items()))
            if ends > now:
                return
            del self._ends[oldest]

    def create(self, person: str = "") -> str:
        session_id = secrets.token_urlsafe(32)
        with self._lock:
            now = self._clock()
            self._prune(now)
            while len(self._ends) >= self._limit:  # full: the oldest goes (the next to end)
                del self._ends[next(iter(self._ends))]
            self._ends[session_id] = (now + self.seconds, person)
        return session_id

    def valid(self, session_id: str) -> bool:
        return self.person(session_id) is not None

    def person(self, session_id: str) -> str | None:
        """Whose session it is ("" for the shared token's), or None when it is no session."""
        with self._lock:
            self._prune(self._clock())
            found = self._ends.get(session_id)
            return None if found is None else found[1]

    def end(self, session_id: str) -> None:
        with self._lock:
            self._ends.pop(session_id, None)


MIN_TOKEN = 16


def parse_tokens(text: str, source: str) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """The token file: one token, held by nobody in particular (``token``), or one line per
    person, ``NAME TOKEN``: a login with that token is NAME, and the decisions it makes are
    recorded as NAME (vouched for by the UI's login: docs/ui.md). Blank lines and lines
    starting with ``#`` say nothing. ``source`` names the file in the errors."""
    lines = [
        (n, line.split())
        for n, line in enumerate(text.splitlines(), 1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if len(lines) == 1 and len(lines[0][1]) == 1:
        token = lines[0][1][0]
        if len(token) < MIN_TOKEN:
            raise ValueError(f"{source}: the token is shorter than {MIN_TOKEN} characters")
        return token, ()
    if not lines:
        raise ValueError(f"{source}: no token in it")
    people: dict[str, str] = {}
    for n, fields in lines:
        if len(fields) != 2:
            raise ValueError(
                f"{source}, line {n}: expected NAME TOKEN (one person's token), "
                f"found {len(fields)} fields"
            )
        name, token = fields
        if len(token) < MIN_TOKEN:
            raise ValueError(
                f"{source}, line {n}: {name}'s token is shorter than {MIN_TOKEN} characters"
            )
        if name in people:
            raise ValueError(f"{source}, line {n}: {name} has a token already")
        if token in people.values():
            raise ValueError(f"{source}, line {n}: {name}'s token is another person's too")
        people[name] = token
    return None, tuple(people.items())


@dataclass(frozen=True)
class AuthConfig:
    read_only: bool = True
    token: str | None = None
    # (name, token) per person: a login with a person's token acts as that person.
    people: tuple[tuple[str, str], ...] = ()
    auth_header: str | None = None
    # Each request's database work as the header's user (rara.ui.user_roles).
    user_roles: bool = False
    session_seconds: float = SESSION_SECONDS
    clock: Callable[[], float] = field(default=time.monotonic, compare=False, repr=False)
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    sessions: Sessions = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.user_roles and not self.auth_header:
            raise ValueError("user roles need the header that names the user (auth_header)")
        secrets_held = [self.token] if self.token is not None else []
        secrets_held += [token for _, token in self.people]
        if secrets_held:  # stable across restarts: derived from the tokens
            object.__setattr__(
                self,
                "key",
                hashlib.sha256(b"rara-ui-key\0" + "\0".join(secrets_held).encode()).digest(),
            )
        object.__setattr__(self, "sessions", Sessions(self.session_seconds, self.clock))

    @property
    def can_login(self) -> bool:
        return self.token is not None or bool(self.people)

    def _mac(self, what: str) -> str:
        return hmac.new(self.key, what.encode(), hashlib.sha256).hexdigest()

    def _caller(self, request: Request) -> tuple[str, str] | None:
        """(identity, what its CSRF tokens are bound to), or None for anonymous. A browser's
        identity is the token's, its CSRF binding is its own session."""
        if self.auth_header is not None:
            user = request.headers.get(self.auth_header, "").strip()
            if user:
                return f"user:{user}", f"user:{user}"
        if self.can_login:
            bearer = request.headers.get("authorization", "")
            if bearer.lower().startswith("bearer "):
                holder = self.check_token(bearer[7:].strip())
                if holder is not None:
                    return self._holder(holder), self._holder(holder)
            session_id = request.cookies.get(SESSION_COOKIE, "")
            holder = self.sessions.person(session_id) if session_id else None
            if holder is not None:
                return self._holder(holder), f"session:{session_id}"
        return None

    @staticmethod
    def _holder(person: str) -> str:
        """A token holder's identity: the person a person's token names (as the proxy's
        header names a user), or ``token`` for the shared token's holder."""
        return f"user:{person}" if person else "token"

    def identity(self, request: Request) -> str | None:
        """The caller's identity, or None (anonymous: may read, may not act)."""
        caller = self._caller(request)
        return None if caller is None else caller[0]

    def check_token(self, candidate: str) -> str | None:
        """Whose token ``candidate`` is: a person's name, "" for the shared token, None for
        no token of ours. Every token is compared (in constant time each), so the answer's
        time does not say which one matched."""
        holder: str | None = None
        for name, token in ((None, self.token), *self.people):
            if token is not None and hmac.compare_digest(candidate.encode(), token.encode()):
                holder = name or ""
        return holder

    def may_act(self, request: Request) -> bool:
        return not self.read_only and self.identity(request) is not None

    def csrf_token(self, request: Request) -> str:
        caller = self._caller(request)
        return "" if caller is None else self._mac(f"csrf:{caller[1]}")

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
