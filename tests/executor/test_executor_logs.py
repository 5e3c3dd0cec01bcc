"""What a plugin writes, as the executor sends it (JobLog events; docs/guide.md, "Step logs"):
each job's own output even with jobs at once on the loop and in threads, in order, before the
terminal event, a secret the plugin resolved masked."""

from __future__ import annotations

import asyncio

import pytest

from rara.executor.wire import make_job
from rara.v1 import executor_pb2 as pb
from tests.executor.support import StartExecutor, collect, kinds


def _text(events: list[pb.ExecuteResponse]) -> str:
    return "".join(e.log.text for e in events if e.HasField("log"))


async def test_each_job_sends_its_own_output_before_its_verdict(
    start_executor: StartExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RARA_SECRET_TESTLOG_TOKEN", "plugin-side-77aa1")
    ex = await start_executor()
    jobs = [
        make_job(
            capability=f"test.log.{'remote' if i % 2 else 'remote_async'}@1",
            idempotency_key=f"k{i}",
            step_key=f"s{i}",
            payload={"lines": 40},
        )
        for i in range(4)
    ]
    results = await asyncio.gather(*(collect(ex.client, job) for job in jobs))
    for i, events in enumerate(results):
        k = kinds(events)
        assert k[:2] == ["accepted", "running"]
        assert k[-1] == "succeeded"
        assert set(k[2:-1]) == {"log"}, k
        outs = [line for line in _text(events).splitlines() if " remote " in line]
        assert outs == [f"s{i} remote {n}" for n in range(40)]
        if i % 2:  # the sync plugin logs a record and a secret it resolved
            assert f"WARNING tests.remote: s{i} logged remotely\n" in _text(events)
            assert "the key is [REDACTED]\n" in _text(events)
            assert "plugin-side-77aa1" not in _text(events)
