"""Back on the database within seconds of an outage's end: the settings of every pool outside
the worker (the operator's, the dashboard's) that bound its reconnect back-off (issue 30).

psycopg_pool retries a lost connection with an exponential back-off (1 s, doubled per failed
attempt), uncapped but for ``reconnect_timeout`` (5 min by default): after a 73 s outage the
operator's next attempt came ~48 s after the database was back, and every handler waited for
it. The pool has no parameter for a cap. What it documents is ``reconnect_timeout``, how long
one chain of attempts goes on, after which it calls ``reconnect_failed`` and gives the
connection's slot up — a new chain then starts only when a client asks for a connection and
finds none free, not for the clients already waiting. So:

- ``reconnect_timeout`` of RECONNECT_SECONDS (2 s): a chain's attempts come at 0, ~1 and 2 s,
  never more than ~1.1 s apart (the back-off's 10 % jitter);
- ``reconnect_failed`` calls the pool's ``check()``, which (documented) lets a pool without
  a connection grow: the next chain starts at once, whether or not a client asks.

While the database is down a pool tries about once a second, each try one refused connection;
the first that succeeds after the database is back goes to the longest waiting client.
CONNECT_TIMEOUT_SECONDS bounds one attempt against a host that does not answer at all (libpq
waits for the kernel's TCP timeout otherwise, minutes), overriding one in the URL. It is not
short: a server that is up but starved authenticates slowly (on a 2-core kind node under a
training load, SCRAM took over 10 s), and an attempt abandoned before it is done is all that
work lost, then started again by the next attempt, and again.

An open connection whose server vanished (a failed-over primary's old address, a partition) is
found dead by TCP, not by a timer on the statement (``dead_peer_settings``): a server that is
alive but slow acknowledges what it is sent at once, so its slow answer is still waited for.
"""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool, ConnectionPool

RECONNECT_SECONDS = 2.0  # the longest chain of attempts; its attempts ~1 s apart
CONNECT_TIMEOUT_SECONDS = 30  # one attempt (libpq's connect_timeout, whole seconds)
DEAD_PEER_SECONDS = 5  # an open connection to a vanished server fails within ~2x this


def _next_chain(pool: ConnectionPool[Any]) -> None:
    pool.check()


async def _next_chain_async(pool: AsyncConnectionPool[Any]) -> None:
    await pool.check()


def pool_settings() -> dict[str, Any]:
    """``ConnectionPool`` arguments that bound its reconnect back-off."""
    return {"reconnect_timeout": RECONNECT_SECONDS, "reconnect_failed": _next_chain}


def async_pool_settings() -> dict[str, Any]:
    """``AsyncConnectionPool`` arguments that bound its reconnect back-off."""
    return {"reconnect_timeout": RECONNECT_SECONDS, "reconnect_failed": _next_chain_async}


def dead_peer_settings() -> dict[str, Any]:
    """libpq parameters under which a connection to a server that vanished fails within
    seconds instead of hanging until the kernel's TCP timeouts (15 min on Linux): keepalive
    probes find an idle one dead (after DEAD_PEER_SECONDS idle, then one probe a second),
    ``tcp_user_timeout`` one whose statement went unacknowledged for DEAD_PEER_SECONDS."""
    return {
        "keepalives": 1,
        "keepalives_idle": DEAD_PEER_SECONDS,
        "keepalives_interval": 1,
        "keepalives_count": DEAD_PEER_SECONDS,
        "tcp_user_timeout": DEAD_PEER_SECONDS * 1000,  # milliseconds
    }
