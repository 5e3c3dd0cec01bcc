"""Nothing credential-looking leaves the executor: progress, errors, results, checkpoints."""

from __future__ import annotations

from rara.executor.client import make_job
from rara.secrets import MASK
from rara.v1 import executor_pb2 as pb
from tests.executor.support import LEAKED, Executor, collect, kinds


async def test_progress_message_and_metric_names_are_masked(executor: Executor) -> None:
    events = await collect(
        executor.client, make_job(capability="t.leaky-progress@1", idempotency_key="k")
    )
    assert kinds(events)[-1] == "succeeded"
    progress = [e.progress for e in events if e.HasField("progress")]
    assert progress, kinds(events)
    assert progress[0].message == f"pushing with {MASK}"
    assert dict(progress[0].metrics) == {f"rate {MASK}": 1.0, "loss": 0.25}
    assert LEAKED not in str(events)


async def test_error_messages_are_masked(executor: Executor) -> None:
    events = await collect(
        executor.client, make_job(capability="t.leaky-error@1", idempotency_key="k")
    )
    error = events[-1].failed.error
    assert error.code == pb.ERROR_CODE_HANDLER_ERROR
    assert error.retryable
    assert "cannot reach" in error.message
    assert MASK in error.message
    assert LEAKED not in str(events)


async def test_a_result_holding_a_credential_fails_terminally_by_path(executor: Executor) -> None:
    events = await collect(
        executor.client, make_job(capability="t.leaky-result@1", idempotency_key="k")
    )
    error = events[-1].failed.error
    assert (error.code, error.retryable) == (pb.ERROR_CODE_HANDLER_ERROR, False)
    assert "the plugin's result holds what looks like a secret at $.config.auth" in error.message
    assert LEAKED not in str(events)


async def test_a_checkpoint_holding_a_credential_is_refused_in_the_plugin(
    executor: Executor,
) -> None:
    events = await collect(
        executor.client, make_job(capability="t.leaky-checkpoint@1", idempotency_key="k")
    )
    assert "checkpoint" not in kinds(events), "the checkpoint never left the process"
    error = events[-1].failed.error
    assert not error.retryable
    assert "checkpoint state holds what looks like a secret at $.resume.password" in error.message
    assert "hunter2" not in str(events)
