"""A worker group's relay: the supervisor's one LISTEN, fanned out to its worker processes.

PostgreSQL wakes every backend that LISTENs in a database at each NOTIFY, whatever the
channel, so a group (``rara.worker.group``) holds one listener and writes what it hears down
each member's stdin, one JSON array a line:

- ``["note", channel, payload]``: a notification (the listener's channels and payloads);
- ``["connect"]``: the listener (re)connected, or this member joined while it was up:
  notifications sent meanwhile are gone, so look now;
- ``["lost"]``: the listener lost its connection (polling covers until it is back).

The member's end (``relayed``) calls the callbacks a worker's own ``listen`` would
(``rara.worker.listener.Notifications``). Every message is a hint, as NOTIFY is: a member
that reads too slowly misses some (the supervisor never waits for a pipe, ``Fanout``) and is
sent ``["connect"]`` once it has caught up. A broken relay is a lost listener for good: the
member polls until it is stopped, or stops itself once its supervisor is gone (nobody is left
to stop it).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from typing import BinaryIO

import structlog

from rara.worker.listener import CANCEL, QUEUED, READY, WAITS

log = structlog.get_logger("rara.worker")

NOTE, CONNECT, LOST = "note", "connect", "lost"
# Bytes written to a member's pipe that it has not read yet, beyond which it misses
# notifications (a NOTIFY payload is at most 8000 bytes: hundreds of messages).
BEHIND = 1 << 20
# A NOTIFY payload, JSON-escaped, fits a line many times over.
LINE_LIMIT = 1 << 20
ORPHAN_CHECK_SECONDS = 1.0


def encode(*message: str) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


class Fanout:
    """The supervisor's end: each message written to every member's pipe, never awaited."""

    def __init__(self) -> None:
        self.pipes: dict[int, asyncio.StreamWriter] = {}
        self.behind: set[int] = set()  # members that missed messages since they last caught up
        self.connected = False

    def add(self, member: int, pipe: asyncio.StreamWriter) -> None:
        self.pipes[member] = pipe
        if self.connected:
            self._write(member, pipe, encode(CONNECT))

    def remove(self, member: int) -> None:
        self.pipes.pop(member, None)
        self.behind.discard(member)

    def send(self, *message: str) -> None:
        data = encode(*message)
        for member, pipe in list(self.pipes.items()):
            self._write(member, pipe, data)

    def _write(self, member: int, pipe: asyncio.StreamWriter, data: bytes) -> None:
        if pipe.is_closing():  # it exited; its keeper removes it
            return
        if pipe.transport.get_write_buffer_size() > BEHIND:
            if member not in self.behind:
                log.warning("worker process not reading its relay; it polls", member=member)
            self.behind.add(member)
            return
        if member in self.behind:  # caught up: what it missed, it looks for
            self.behind.discard(member)
            pipe.write(encode(CONNECT))
        pipe.write(data)

    # The listener's callbacks (rara.worker.listener.listen).

    def on_connect(self) -> None:
        self.connected = True
        self.send(CONNECT)

    def on_lost(self) -> None:
        self.connected = False
        self.send(LOST)

    def on_ready(self, capability: str) -> None:
        self.send(NOTE, READY, capability)

    def on_queued(self, capability: str) -> None:
        self.send(NOTE, QUEUED, capability)

    def on_waits(self) -> None:
        self.send(NOTE, WAITS, "")

    def on_cancel(self) -> None:
        self.send(NOTE, CANCEL, "")


def read_header(fd: int = 0) -> bytes:
    """The first line of ``fd`` (the member's settings), read a byte at a time so that nothing
    after it is taken from the pipe before ``relayed`` reads it."""
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            raise EOFError("no settings on stdin (started by `rara worker --processes N` only)")
        line += byte
    return bytes(line)


def relayed(fd: int = 0) -> _Relayed:
    """The member's notifications: the relay on ``fd`` (a ``Notifications`` source)."""
    pipe = open(fd, "rb", buffering=0, closefd=False)  # noqa: SIM115 - the transport's to close
    return _Relayed(pipe, os.getppid())


class _Relayed:
    def __init__(self, pipe: BinaryIO, supervisor: int) -> None:
        self.pipe = pipe
        self.supervisor = supervisor

    async def __call__(
        self,
        *,
        on_ready: Callable[[str], None],
        on_cancel: Callable[[], None],
        on_connect: Callable[[], None],
        on_waits: Callable[[], None],
        on_queued: Callable[[str], None],
        on_lost: Callable[[], None],
    ) -> None:
        notes: dict[str, Callable[[str], None]] = {
            READY: on_ready,
            QUEUED: on_queued,
            WAITS: lambda _: on_waits(),
            CANCEL: lambda _: on_cancel(),
        }
        events = {CONNECT: on_connect, LOST: on_lost}
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), self.pipe
        )
        try:
            while True:
                try:
                    line = await reader.readline()
                except ValueError:  # a line over the limit: not from our supervisor; skip it
                    continue
                except OSError as exc:
                    log.warning("worker group relay failed", error=str(exc))
                    break
                if not line:
                    break
                try:
                    kind, *rest = json.loads(line)
                    if kind == NOTE:
                        channel, payload = rest
                        if channel in notes:
                            notes[channel](str(payload))
                    elif kind in events:
                        events[kind]()
                except (ValueError, TypeError) as exc:  # a hint we cannot read is no hint
                    log.warning("unreadable relay message", error=str(exc))
        finally:
            transport.close()
        # Broken: a listener lost for good. Poll, as a worker does while its listener is away,
        # until stopped; with the supervisor gone there is nobody to stop this process, so it
        # stops itself (returning stops the worker gracefully, its leases released).
        on_lost()
        log.warning("worker group relay broken; polling")
        while os.getppid() == self.supervisor:  # noqa: ASYNC110 - no event says it, only getppid
            await asyncio.sleep(ORPHAN_CHECK_SECONDS)
        log.warning("worker group supervisor gone; stopping")
