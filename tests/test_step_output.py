"""The capture's buffer on its own (rara.step_output): the bound cut between
characters, masking of values written in pieces and of the lease token, replays with the same
seqs, nothing taken after the end."""

from __future__ import annotations

import copy
import io

import pytest

from rara.step_output import CHUNK_BYTES, HEAD_BYTES, TAIL_BYTES, StepOutput, _StepStream

TOKEN = "5f0c8a2e-9d1b-4c3a-8e7f-123456789abc"


def _text(output: StepOutput, final: bool = True) -> str:
    chunks = output.take(final)
    output.confirm(len(chunks))
    assert all(len(body.encode()) <= CHUNK_BYTES for _, body, _ in chunks)
    return "".join(body for _, body, _ in chunks)


def test_multibyte_output_is_cut_between_characters() -> None:
    """3-byte characters over the bound: the head and the tail hold whole characters, and
    the dropped count is exactly what is not kept."""
    output = StepOutput()
    line = "€" * 1000 + "\n"  # 3001 bytes
    lines = 800
    for _ in range(lines):
        output.write(line)
    text = _text(output)
    assert "\ufffd" not in text
    head, _, rest = text.partition("[rara: ")
    marker, _, tail = rest.partition("\n")
    dropped = int(marker.split()[0])
    assert HEAD_BYTES - 3 < len(head.encode()) <= HEAD_BYTES
    assert TAIL_BYTES - 3 < len(tail.encode()) <= TAIL_BYTES
    assert len(head.encode()) + dropped + len(tail.encode()) == lines * len(line.encode())
    assert tail.endswith(line)


def test_a_value_written_in_pieces_is_masked_whole() -> None:
    output = StepOutput(masked=[TOKEN])
    output.secrets.add("s3cr3t-value")  # as rara.secrets.resolve adds one
    for piece in ("lease ", TOKEN[:10], TOKEN[10:], " and s3cr", "3t-value", "\n", "no newline"):
        output.write(piece)
    assert _text(output) == "lease [REDACTED] and [REDACTED]\nno newline"


def test_a_failed_write_is_sent_again_with_the_same_seqs() -> None:
    output = StepOutput()
    output.write("one\n")
    first = output.take()
    output.write("two\n")
    again = output.take()  # the first write failed: not confirmed
    assert again[0] == first[0]
    assert [seq for seq, _, _ in again] == [1, 2]
    output.confirm(len(again))
    output.write("three\n")
    assert output.take(final=True) == [(3, "three\n", 0)]


def test_nothing_is_taken_after_the_end() -> None:
    output = StepOutput()
    output.write("last\n")
    assert _text(output) == "last\n"
    output.write("from a thread left behind\n")
    assert not output.pending()
    assert output.take(final=True) == []


def test_a_step_stream_copied_or_made_bare_never_recurses() -> None:
    """copy.copy asks a bare instance (no __init__) for __setstate__: that must be an
    AttributeError, not a lookup of `underlying` through __getattr__ without end (which, in a
    thread's small stack, was a segfault)."""
    stream = _StepStream(io.StringIO())
    copied = copy.copy(stream)
    copied.write("through the copy\n")
    assert stream.underlying.getvalue() == "through the copy\n"
    bare = _StepStream.__new__(_StepStream)
    with pytest.raises(AttributeError):
        bare.encoding  # noqa: B018
