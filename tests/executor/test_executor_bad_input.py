"""Bad input over the wire: each refusal is clear, names what is wrong, and nothing ran.

"Nothing ran" is checked by the event stream: a refused job gets a single ``failed`` event
(seq 1) and never ``accepted``/``running``, so no plugin started and nothing was stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc
import pytest
from structlog.testing import capture_logs

from rara.executor.client import JobTooLarge, make_job
from rara.executor.limits import MAX_MESSAGE_BYTES
from rara.v1 import executor_pb2 as pb
from rara.v1 import executor_pb2_grpc as pb_grpc
from tests.executor.support import BIG_WAIT_S, LEAKED, TOKEN, WAIT_S, Executor, collect, kinds

BIG = "x" * (MAX_MESSAGE_BYTES + 1)


def _valid() -> pb.Job:
    return make_job(capability="test.echo@1", idempotency_key="run-1:step", payload={"n": 1})


async def _refusal(executor: Executor, job: pb.Job) -> pb.Error:
    events = await collect(executor.client, job)
    assert kinds(events) == ["failed"], "refused before any work: no accepted/running"
    assert events[0].seq == 1
    error = events[0].failed.error
    assert not error.retryable, "the same job would be refused again"
    return error


async def test_oversized_job_is_refused_by_the_client_naming_the_limit(
    executor: Executor,
) -> None:
    job = make_job(capability="test.echo@1", idempotency_key="k", payload={"blob": BIG})
    with pytest.raises(JobTooLarge, match=f"limit is {MAX_MESSAGE_BYTES} bytes") as err:
        await collect(executor.client, job)
    assert not err.value.retryable
    assert err.value.code == "JOB_TOO_LARGE"
    assert executor.server.servicer._jobs == {}


async def test_oversized_message_from_another_client_is_refused_by_the_server(
    executor: Executor,
) -> None:
    # A client with no send limit of its own (another implementation, an old rara).
    job = make_job(capability="test.echo@1", idempotency_key="k", payload={"blob": BIG})
    options = [("grpc.max_send_message_length", -1)]
    async with grpc.aio.insecure_channel(executor.address, options=options) as channel:
        call = pb_grpc.ExecutorServiceStub(channel).Execute(
            pb.ExecuteRequest(job=job), metadata=(("authorization", f"Bearer {TOKEN}"),)
        )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async with asyncio.timeout(WAIT_S):
                _ = [e async for e in call]
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert str(MAX_MESSAGE_BYTES) in (err.value.details() or ""), err.value.details()
    assert executor.server.servicer._jobs == {}


async def test_oversized_result_fails_the_job_naming_the_limit(executor: Executor) -> None:
    events = await collect(
        executor.client, make_job(capability="t.huge-result@1", idempotency_key="k"), BIG_WAIT_S
    )
    error = events[-1].failed.error
    assert (error.code, error.retryable) == (pb.ERROR_CODE_HANDLER_ERROR, False)
    assert f"limit is {MAX_MESSAGE_BYTES} bytes" in error.message


def _no_key(j: pb.Job) -> None:
    j.idempotency_key = ""


def _no_capability(j: pb.Job) -> None:
    j.capability = ""


def _attempt_zero(j: pb.Job) -> None:
    j.attempt = 0


def _payload_list(j: pb.Job) -> None:
    j.payload_json = b"[1, 2]"


def _payload_text(j: pb.Job) -> None:
    j.payload_json = b"not json"


def _payload_nan(j: pb.Job) -> None:
    j.payload_json = b'{"x": NaN}'


def _payload_deep(j: pb.Job) -> None:
    j.payload_json = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


def _bad_digest(j: pb.Job) -> None:
    j.inputs.add(name="collect/corpus", digest="sha256:short", size=1)


def _deadline_out_of_range(j: pb.Job) -> None:
    j.deadline.seconds = 2**62


def _unknown(j: pb.Job) -> None:
    j.capability = "nope.nothing@1"


def _other_major(j: pb.Job) -> None:
    j.capability = "test.echo@7"


def _no_major(j: pb.Job) -> None:
    j.capability = "test.echo"


@pytest.mark.parametrize(
    ("mutate", "code", "names"),
    [
        (_no_key, pb.ERROR_CODE_INVALID_ARGUMENT, "job.idempotency_key is required"),
        (_no_capability, pb.ERROR_CODE_INVALID_ARGUMENT, "job.capability is required"),
        (_attempt_zero, pb.ERROR_CODE_INVALID_ARGUMENT, "job.attempt must be >= 1, got 0"),
        (_payload_list, pb.ERROR_CODE_INVALID_ARGUMENT, "payload_json must be a JSON object"),
        (_payload_text, pb.ERROR_CODE_INVALID_ARGUMENT, "payload_json is not valid UTF-8 JSON"),
        (_payload_nan, pb.ERROR_CODE_INVALID_ARGUMENT, "NaN is not JSON"),
        (_payload_deep, pb.ERROR_CODE_INVALID_ARGUMENT, "payload_json nests too deeply"),
        (_bad_digest, pb.ERROR_CODE_INVALID_ARGUMENT, "artifact 'collect/corpus': artifact digest"),
        (_deadline_out_of_range, pb.ERROR_CODE_INVALID_ARGUMENT, "job.deadline is out of range"),
        (_unknown, pb.ERROR_CODE_UNKNOWN_CAPABILITY, "'nope.nothing' is not served"),
        (_other_major, pb.ERROR_CODE_INCOMPATIBLE_VERSION, "wants major version 7"),
        (_no_major, pb.ERROR_CODE_INVALID_ARGUMENT, "must look like name@major"),
    ],
)
async def test_malformed_jobs_are_refused_naming_the_field(
    executor: Executor, mutate: Callable[[pb.Job], None], code: int, names: str
) -> None:
    job = _valid()
    mutate(job)
    error = await _refusal(executor, job)
    assert error.code == code
    assert names in error.message, error.message


async def test_a_credential_in_the_payload_is_refused_by_path_never_echoed(
    executor: Executor,
) -> None:
    job = make_job(
        capability="test.echo@1",
        idempotency_key="k",
        payload={"source": {"headers": ["x", f"token {LEAKED}"]}, "password": "pw"},
    )
    with capture_logs() as logs:
        error = await _refusal(executor, job)
    assert error.code == pb.ERROR_CODE_INVALID_ARGUMENT
    assert "$.source.headers[1] (looks like a GitHub token)" in error.message
    assert "$.password (a 'password' field)" in error.message
    assert "secretRef" in error.message
    assert LEAKED not in str(error)
    assert LEAKED not in repr(logs)
