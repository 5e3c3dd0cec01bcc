"""A worker group's relay and its members' settings (rara.worker.relay, rara.worker.group),
without processes: the wire, the member's end on a real pipe, the supervisor's fan-out."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict

from rara.worker import relay
from rara.worker.group import listener_url, member_settings
from rara.worker.listener import CANCEL, QUEUED, READY, WAITS
from rara.worker.relay import CONNECT, LOST, NOTE, Fanout, encode
from rara.worker.settings import WorkerSettings


def _callbacks(calls: list[tuple[str, ...]]) -> dict[str, Any]:
    return {
        "on_ready": lambda cap: calls.append(("ready", cap)),
        "on_queued": lambda cap: calls.append(("queued", cap)),
        "on_waits": lambda: calls.append(("waits",)),
        "on_cancel": lambda: calls.append(("cancel",)),
        "on_connect": lambda: calls.append(("connect",)),
        "on_lost": lambda: calls.append(("lost",)),
    }


async def test_a_member_hears_what_the_listener_heard_then_a_broken_relay_is_a_lost_listener(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r, w = os.pipe()
    os.write(
        w,
        encode(CONNECT)
        + encode(NOTE, READY, "a@1")
        + encode(NOTE, QUEUED, "b@1")
        + encode(NOTE, WAITS, "")
        + b"not json\n"
        + encode(NOTE, "rara_elsewhere", "x")  # a channel it does not know: skipped
        + encode(NOTE, CANCEL, "")
        + encode(LOST),
    )
    os.close(w)  # the supervisor is gone: end of file after what it wrote
    parents = iter([4242, 4242, 1])  # the supervisor, then init: it was orphaned
    monkeypatch.setattr(relay.os, "getppid", lambda: next(parents))
    monkeypatch.setattr(relay, "ORPHAN_CHECK_SECONDS", 0.001)
    source = relay.relayed(r)
    calls: list[tuple[str, ...]] = []
    await source(**_callbacks(calls))  # returns once orphaned: the worker then stops
    os.close(r)
    assert calls == [
        ("connect",),
        ("ready", "a@1"),
        ("queued", "b@1"),
        ("waits",),
        ("cancel",),
        ("lost",),
        ("lost",),  # the relay broke: polling from here on
    ]


def test_the_settings_line_leaves_the_relay_in_the_pipe() -> None:
    r, w = os.pipe()
    os.write(w, b'{"id": "g-0"}\n' + encode(CONNECT))
    os.close(w)
    assert relay.read_header(r) == b'{"id": "g-0"}\n'
    assert os.read(r, 100) == encode(CONNECT)
    with pytest.raises(EOFError):
        relay.read_header(r)
    os.close(r)


class _Pipe:
    """A StreamWriter as the fan-out sees it: what was written, and how much is unread."""

    def __init__(self) -> None:
        self.lines: list[list[str]] = []
        self.unread = 0
        self.closing = False
        self.transport = self

    def get_write_buffer_size(self) -> int:
        return self.unread

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        self.lines += [json.loads(line) for line in data.splitlines()]


def test_fanout_sends_every_member_everything_and_a_laggard_a_connect_when_it_caught_up() -> None:
    fanout = Fanout()
    one, two = _Pipe(), _Pipe()
    fanout.add(0, one)  # type: ignore[arg-type]
    fanout.on_connect()
    fanout.add(1, two)  # type: ignore[arg-type]  # joins while the listener is up: told so
    fanout.on_ready("a@1")
    two.unread = relay.BEHIND + 1  # member 1 stopped reading
    fanout.on_queued("b@1")
    fanout.on_cancel()
    two.unread = 0  # and caught up: whatever it missed, it looks for
    fanout.on_waits()
    fanout.on_lost()
    assert one.lines == [
        [CONNECT],
        [NOTE, READY, "a@1"],
        [NOTE, QUEUED, "b@1"],
        [NOTE, CANCEL, ""],
        [NOTE, WAITS, ""],
        [LOST],
    ]
    assert two.lines == [[CONNECT], [NOTE, READY, "a@1"], [CONNECT], [NOTE, WAITS, ""], [LOST]]
    two.closing = True  # it exited
    fanout.on_ready("c@1")
    assert two.lines[-1] == [LOST]
    fanout.remove(1)
    assert list(fanout.pipes) == [0]


def test_member_settings_are_the_groups_with_an_id_and_a_port_each() -> None:
    group = WorkerSettings(id="pod-a", processes=3, metrics_port=9100, concurrency=4)
    members = [member_settings(group, "postgresql:///x", k) for k in range(3)]
    assert [m.id for m in members] == ["pod-a-0", "pod-a-1", "pod-a-2"]
    assert [m.metrics_port for m in members] == [9100, 9101, 9102]
    assert {(m.processes, m.concurrency, m.database_url) for m in members} == {
        (1, 4, "postgresql:///x")
    }
    # Unset stays unset: an artifact_root not given defers to RARA_ARTIFACTS in the member too.
    assert "artifact_root" not in members[0].model_fields_set
    line = members[0].model_dump_json(exclude_unset=True)
    assert WorkerSettings.model_validate_json(line) == members[0]
    assert member_settings(WorkerSettings(metrics_port=0, processes=2), "u", 1).metrics_port == 0
    with pytest.raises(ValueError, match="id"):
        member_settings(WorkerSettings(id="x" * 200, processes=2), "u", 1)


def test_the_listener_is_named_apart() -> None:
    assert conninfo_to_dict(listener_url("postgresql://h/db"))["application_name"] == (
        "rara worker listener"
    )
    named = listener_url("postgresql://h/db?application_name=fleet-a")
    assert conninfo_to_dict(named)["application_name"] == "fleet-a listener"
