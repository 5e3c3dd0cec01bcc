"""What a step's code writes — ``print``, ``sys.stdout``/``sys.stderr``, Python ``logging`` —
captured per attempt, bounded and with secrets masked (docs/guide.md, "Step logs"). In the
worker, around an in-process handler (``rara.worker.log_shipping`` writes it to the database
while the step runs); in an executor, around a plugin (``rara.executor.jobs`` sends it as
``JobLog`` events, which the worker relays into the attempt's own capture: ``relay``).

Per attempt, not per process: several steps run at once in one worker (tasks on its loop,
sync handlers in threads), so nothing is redirected globally. ``install`` puts one proxy on
``sys.stdout`` and ``sys.stderr`` and one handler on the root logger, once; each looks up the
attempt it is writing for in a context variable (``CURRENT``), which ``captured`` sets inside
the handler's own task — a task runs in a copy of its creator's context and a sync handler's
thread in a copy of the task's (``rara.worker.dispatch``), so a write lands on the attempt of
the code that made it. Outside an attempt (the worker's own code) nothing is captured. The
proxies still write through to the worker's terminal, as before.

The bound: an attempt keeps its first ``HEAD_BYTES`` and its last ``TAIL_BYTES`` of output
(UTF-8, after masking); what lies between is dropped, and the first chunk of the tail starts
with a line saying how many bytes were (the chunk's ``dropped`` says it too). The head is
shipped as it is written; the tail only at the attempt's end.

Masking (``rara.secrets.redact_output``) works on whole lines, so a secret written in pieces is
still seen whole: a line is held until its newline, the attempt's end, or ``CHUNK_BYTES``. It
costs ~0.5 µs a byte, so only what is kept is masked: the head as it is written, the tail once,
at the end (a noisy step costs the worker the same CPU for its log whatever it writes).
NUL, which PostgreSQL's text cannot hold, is stored as the four characters ``\\x00``.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from typing import Any, TextIO, TypeVar

from rara.secrets import RESOLVED, redact_output

T = TypeVar("T")

HEAD_BYTES = 512 * 1024
TAIL_BYTES = 512 * 1024
CHUNK_BYTES = 64 * 1024  # the most one row holds (rara_step_logs); a batch is shipped at this
MASK_BATCH = 16 * 1024  # characters of whole lines masked in one pass
# Bytes of tail kept beyond TAIL_BYTES until the end, so that the tail is cut where a line
# starts before it is masked, and is still TAIL_BYTES long after masking shortened it.
TAIL_SLACK = 64 * 1024
DROPPED_LINE = "[rara: {dropped} bytes of output dropped here: a step's log keeps its first {head} KiB and its last {tail} KiB]\n"  # noqa: E501

CURRENT: ContextVar[StepOutput | None] = ContextVar("rara_step_output", default=None)

Chunk = tuple[int, str, int]  # (seq, body, bytes dropped just before it)


class StepOutput:
    """One attempt's captured output: written from any thread, taken in chunks by the shipper."""

    def __init__(
        self,
        masked: Iterable[str] = (),
        on_full: Callable[[], object] | None = None,
        *,
        marker: bool = True,
    ) -> None:
        self._lock = threading.Lock()
        # The line that says how much was dropped, in the text (the database's chunks), or in
        # the chunk's count alone (an executor's JobLog: the worker writes the line).
        self._marker = marker
        # Values to mask (the lease token); the secrets the handler resolves join them.
        self.secrets: set[str] = set(masked)
        self._on_full = on_full  # a chunk's worth waits: ship now (called from any thread)
        self._line: list[str] = []  # text after the last newline, held for masking
        self._line_chars = 0
        # Whole lines not yet masked: masked a batch at a time (a regex pass per line costs
        # ~50 µs; per 16 KiB, about the same), at the latest when taken.
        self._lines: list[str] = []
        self._lines_chars = 0
        self._head_left = HEAD_BYTES
        self._head = bytearray()  # masked head output not yet taken
        self._tail = bytearray()  # masked output past the head (its end kept)
        self._dropped = 0
        self._seq = 0
        self._unsent: list[Chunk] = []  # taken, not yet confirmed written
        self.closed = False

    def write(self, text: str) -> None:
        full = False
        with self._lock:
            if self.closed:  # a thread the attempt left behind: its end is written already
                return
            newline = text.rfind("\n")
            if newline < 0:
                self._line.append(text)
                self._line_chars += len(text)
                if self._line_chars < CHUNK_BYTES:
                    return
                whole, rest = "".join(self._line), ""
            else:
                whole, rest = "".join(self._line) + text[: newline + 1], text[newline + 1 :]
            self._line, self._line_chars = ([rest], len(rest)) if rest else ([], 0)
            self._lines.append(whole)
            self._lines_chars += len(whole)
            if self._lines_chars < MASK_BATCH:
                return
            self._accept_lines()
            full = len(self._head) >= CHUNK_BYTES
        if full and self._on_full is not None:
            self._on_full()

    def relay(self, text: str, dropped: int) -> None:
        """Output an executor captured (a ``JobLog``): ``dropped`` bytes it left out before
        ``text`` (its bound, the same as this one) count as dropped here, past the head."""
        if dropped:
            with self._lock:
                # The executor's head ended mid-line: it ends the head here too (the executor
                # masked that line whole already).
                self._accept_line()
                self._head_left = 0
                self._dropped += dropped
        if text:
            self.write(text)

    def _accept_line(self) -> None:
        """The whole lines, then the held line as it is (lock held)."""
        self._accept_lines()
        if self._line:
            self._accept("".join(self._line))
            self._line, self._line_chars = [], 0

    def _accept_lines(self) -> None:
        if self._lines:
            self._accept("".join(self._lines))
            self._lines, self._lines_chars = [], 0

    def _accept(self, text: str) -> None:
        text = text.replace("\x00", "\\x00")
        if self._head_left == 0:  # past the head: masked at the end, only what is kept
            self._tail += text.encode()
            if len(self._tail) > 2 * TAIL_BYTES:  # trimmed now and then, not at every write
                self._trim_tail(TAIL_BYTES + TAIL_SLACK, at_line=True)
            return
        data = redact_output(text, self.secrets).encode()
        cut = min(self._head_left, len(data))
        while cut < len(data) and data[cut] & 0xC0 == 0x80:
            cut -= 1  # the head ends between characters
        self._head += data[:cut]
        self._head_left = 0 if cut < len(data) else self._head_left - cut
        self._tail += data[cut:]

    def _trim_tail(self, keep: int, *, at_line: bool = False) -> None:
        """Drop the tail's start, keeping ``keep`` bytes: from a line's start if one begins
        soon (``at_line``: so that no value is cut in two before it is masked), else from a
        character's."""
        cut = max(0, len(self._tail) - keep)
        line = self._tail.find(b"\n", cut, cut + TAIL_SLACK // 2) if at_line else -1
        if line >= 0:
            cut = line + 1
        while cut < len(self._tail) and self._tail[cut] & 0xC0 == 0x80:
            cut += 1  # never start inside a character
        self._dropped += cut
        del self._tail[:cut]

    def _masked_tail(self) -> None:
        """The tail as it is kept: masked (its text beyond the head was kept as written), then
        cut to ``TAIL_BYTES``."""
        masked = redact_output(self._tail.decode(errors="replace"), self.secrets).encode()
        self._tail = bytearray(masked)
        if len(self._tail) > TAIL_BYTES:
            self._trim_tail(TAIL_BYTES)

    def take(self, final: bool = False) -> list[Chunk]:
        """Every chunk not yet confirmed: those of an earlier failed write (same seqs, so a
        replay is stored once), then the output written since. ``final``: the attempt ends —
        its held line and its tail too, and nothing more is captured."""
        with self._lock:
            self._accept_lines()
            if final and not self.closed:
                self.closed = True
                self._accept_line()
            self._unsent += [(self._next_seq(), body, 0) for body in _split(self._head)]
            self._head.clear()
            if final and self._tail:
                self._masked_tail()
                marker = (
                    DROPPED_LINE.format(
                        dropped=self._dropped, head=HEAD_BYTES // 1024, tail=TAIL_BYTES // 1024
                    ).encode()
                    if self._marker and self._dropped
                    else b""
                )
                bodies = _split(marker + self._tail)
                self._tail.clear()
                self._unsent.append((self._next_seq(), bodies[0], self._dropped))
                self._unsent += [(self._next_seq(), body, 0) for body in bodies[1:]]
            return list(self._unsent)

    def pending(self) -> bool:
        """Whether anything waits to be written (most steps write nothing: no statement)."""
        with self._lock:
            return bool(self._line or self._lines or self._head or self._tail or self._unsent)

    def confirm(self, count: int) -> None:
        """The first ``count`` chunks ``take`` returned are written."""
        with self._lock:
            del self._unsent[:count]

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq


def _split(data: bytes | bytearray) -> list[str]:
    """``data`` as text in pieces of at most ``CHUNK_BYTES``, each cut between characters."""
    pieces = []
    start = 0
    while start < len(data):
        end = min(start + CHUNK_BYTES, len(data))
        while end < len(data) and data[end] & 0xC0 == 0x80:
            end -= 1
        pieces.append(bytes(data[start:end]).decode(errors="replace"))
        start = end
    return pieces


def capture(output: StepOutput) -> None:
    """From now on, in this context (a task's or a copy's), output goes to ``output`` and the
    secrets resolved are masked in it."""
    CURRENT.set(output)
    RESOLVED.set(output.secrets)


async def captured(output: StepOutput, work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work()`` with its output going to ``output``; await it inside the handler's own
    task, whose context (a copy) is the only one this changes. A factory, not a coroutine: a
    task cancelled before its first step (a worker stopping) would leave one never awaited."""
    capture(output)
    return await work()


class _StepStream:
    """``sys.stdout``/``sys.stderr``: a write is the current attempt's too, if any."""

    def __init__(self, underlying: TextIO) -> None:
        self.underlying = underlying

    def write(self, text: str) -> int:
        output = CURRENT.get()
        if output is not None and isinstance(text, str):
            output.write(text)
        return self.underlying.write(text)

    def flush(self) -> None:
        self.underlying.flush()

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, isatty, buffer…
        # Read from __dict__: an instance made without __init__ (copy.copy asks a bare one
        # for __setstate__) has no `underlying`, and `self.underlying` here would call this
        # again, without end — a segfault in a thread's small stack, not a RecursionError.
        underlying = self.__dict__.get("underlying")
        if underlying is None:
            raise AttributeError(name)
        return getattr(underlying, name)


class _StepLogHandler(logging.Handler):
    """Records that reach the root logger, into the current attempt's log (if any)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        output = CURRENT.get()
        if output is None:
            return
        try:
            output.write(self.format(record) + "\n")
        except Exception:
            self.handleError(record)


def install() -> None:
    """The capture's proxies and logging handler, once per process (again after something
    replaced ``sys.stdout``, as pytest does)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, _StepStream):
            setattr(sys, name, _StepStream(stream))
    root = logging.getLogger()
    if not any(isinstance(h, _StepLogHandler) for h in root.handlers):
        root.addHandler(_StepLogHandler())
