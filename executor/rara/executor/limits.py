"""Size limits on the executor wire, set explicitly on both ends.

gRPC's defaults differ by direction (4 MiB to receive, unlimited to send), so an oversized
job used to fail only on the far side with a bare RESOURCE_EXHAUSTED. One explicit number on
server and client makes the limit part of the contract: large data travels as artifacts
(content-addressed, by reference), never inside a message.
"""

from __future__ import annotations

MAX_MESSAGE_BYTES = 16 * 1024 * 1024

GRPC_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
)

# A Session's bounds (the Go executor's are the same, executor/go/executor/session.go). A
# SessionRequest carrying more jobs than this ends the session with INVALID_ARGUMENT naming
# the limit; clients split their batches at it.
MAX_SESSION_JOBS_PER_MESSAGE = 1000
# The events an executor holds for one Session, waiting or being written: while either bound
# is reached, jobs' events wait in their own outboxes (a save_checkpoint waits with them) and
# no further request is read from the stream, so a worker that stops reading answers is
# stopped by gRPC flow control instead of growing the executor's memory. A single event larger
# than the byte bound still goes when nothing else waits.
SESSION_QUEUE_EVENTS = 1024
SESSION_QUEUE_BYTES = MAX_MESSAGE_BYTES

# A client's reconnect backoff capped at 1 s (gRPC's default grows to 120 s): an executor that
# comes up after its worker (a restarted or scaled-from-zero GPU pod) is reached within about a
# second, where the default kept failing fast for the rest of a long backoff.
CLIENT_OPTIONS: tuple[tuple[str, int], ...] = (
    *GRPC_OPTIONS,
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.min_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 1000),
)


def describe(size: int) -> str:
    """The sentence every size refusal uses, so the limit is always named the same way."""
    return (
        f"message is {size} bytes; the executor wire limit is {MAX_MESSAGE_BYTES} bytes "
        f"({MAX_MESSAGE_BYTES // (1024 * 1024)} MiB): pass large data as artifacts"
    )
