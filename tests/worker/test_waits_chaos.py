"""Waits and approvals under chaos (issue 35, item 5): real worker processes SIGKILLed and
restarted at random, a real PostgreSQL crash (``pg_ctl stop -m immediate``) while timers come
due, signals and decisions sent twice and at once.

A wait holds nothing a crash can lose: it is rows, ended by whichever worker fires its time, or
by the statement that signals or decides. So, whatever is killed when: every wait ends once
(no attempt, never leased; one signal row per signalled run, one decision per gate), its
downstream runs once, and the history checker (tests/support/history.py, invariant 8 for
waits) passes. Randomness is seeded; the seconds between kills are the chaos's cadence, every
other pause waits for a state.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara import waits
from rara.errors import WaitRefused
from rara.pg.embedded import EmbeddedPostgres, temporary_server
from rara.pg.migrate import migrate
from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.history import check_history
from tests.support.runs import attempts_of, steps_of
from tests.support.waiting import wait_until
from tests.support.workers import WorkerProcess

Conn = psycopg.Connection[Any]
Spawn = Callable[..., WorkerProcess]

TIMERS = {"timer-2s": "2s", "timer-3s": "3s", "timer-4s": "4s"}


# Kills cut a or b short as often as they come: enough attempts that none runs out of them.
RETRY = {"maxAttempts": 30, "initialDelay": "50ms", "maxDelay": "500ms"}


def _define(
    conn: Conn, *, a: str = "test.noop@1", b: str = "test.noop@1", timer: str = "3s"
) -> None:
    """a -> w -> b, w for each kind: ``timer-*`` (wait for:), ``signalled`` (wait for signal
    ``go``), ``gated`` (an approval showing a)."""
    first = {"key": "a", "capability": a, "retry": RETRY}
    then = {"key": "b", "capability": b, "dependsOn": ["w"], "retry": RETRY}
    waits_for: dict[str, dict[str, Any]] = {
        name: {"wait": {"for": seconds}} for name, seconds in {**TIMERS, "timer": timer}.items()
    }
    waits_for["signalled"] = {"wait": {"signal": "go"}}
    waits_for["gated"] = {"approval": {"show": ["a"]}}
    for name, rule in waits_for.items():
        apply(conn, name, [first, {"key": "w", "dependsOn": ["a"], **rule}, then])


def _start(conn: Conn, name: str, input: dict[str, Any] | None = None) -> int:
    return start_run(conn, name, input=input or {}, queue_anyway=True).run_id


def _waiting(conn: Conn, kind: str) -> list[int]:
    return [
        r[0]
        for r in conn.execute(
            "SELECT run_id FROM rara_waits WHERE kind = %s ORDER BY run_id", (kind,)
        ).fetchall()
    ]


def _send(conn: Conn, run_id: int, kind: str, key: str | None = None) -> Any:
    """The signal ``go`` (``key``: by default its name, so the run takes it once) or the
    approval; a refusal (the wait has ended) is an answer too."""
    try:
        if kind == "signal":
            return waits.signal(conn, run_id, "go", {"run": run_id}, key=key)
        return waits.decide(conn, run_id, "w", approve=True, reason="looks right")
    except WaitRefused as refused:
        return refused


class Senders:
    """Sends each signal or decision twice at once, from two threads with connections of their
    own (a barrier between connecting and sending), after a random delay; keeps the answers."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.answers: dict[int, list[Any]] = {}
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def send_twice(
        self, run_id: int, kind: str, *, delay: float = 0.0, other_key: bool = False
    ) -> None:
        """``other_key``: the second signal under a key of its own (the wait ends once: one
        is accepted, the other refused)."""
        self.answers.setdefault(run_id, [])
        both = threading.Barrier(2)

        def one(key: str | None) -> None:
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    time.sleep(delay)  # the chaos's cadence: a moment among the kills
                    both.wait(10)
                    answer = _send(conn, run_id, kind, key)
                with self._lock:
                    self.answers[run_id].append(answer)
            except BaseException as exc:  # surfaced by join()
                with self._lock:
                    self.errors.append(exc)

        for key in (None, "again" if other_key else None):
            thread = threading.Thread(target=one, args=(key,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def join(self) -> dict[int, list[Any]]:
        for thread in self.threads:
            thread.join(30)
            assert not thread.is_alive(), "a sender hung"
        assert not self.errors, self.errors
        return self.answers


class Fleet:
    """Worker processes in slots; ``kill`` SIGKILLs a slot's process and starts another there
    (a new id, as a restarted pod has)."""

    def __init__(self, spawn: Spawn, prefix: str, n: int, **settings: Any) -> None:
        self.spawn = spawn
        self.prefix = prefix
        self.settings = settings
        self.generation = [0] * n
        self.procs = [spawn(f"{prefix}{i}-0", wait=False, **settings) for i in range(n)]
        self.kills = 0

    def kill(self, slot: int, *, restart: bool = True) -> str:
        victim = self.procs[slot]
        victim.signal(signal.SIGKILL)
        victim.wait(10)
        self.kills += 1
        if restart:
            self.generation[slot] += 1
            self.procs[slot] = self.spawn(
                f"{self.prefix}{slot}-{self.generation[slot]}", wait=False, **self.settings
            )
        return victim.id

    def slot_of(self, worker_id: str) -> int | None:
        return next((i for i, p in enumerate(self.procs) if p.id == worker_id), None)

    def alive(self) -> bool:
        return all(p.proc.poll() is None for p in self.procs)


def _unended(conn: Conn, runs: list[int]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM rara_runs WHERE id = ANY(%s)"
        " AND status NOT IN ('succeeded', 'failed', 'cancelled')",
        (runs,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _assert_each_wait_ended_once(
    conn: Conn, kinds: dict[int, str], answers: dict[int, list[Any]], sends: int = 2
) -> None:
    """Every run succeeded; its wait step ended once, by its time, its one signal or its one
    decision (of ``sends`` answers exactly one accepted or recorded); its b succeeded in exactly
    one attempt, begun after the wait ended; and the history checker passes."""
    runs = list(kinds)
    statuses = dict(
        conn.execute(
            "SELECT id, status::text FROM rara_runs WHERE id = ANY(%s)", (runs,)
        ).fetchall()
    )
    assert statuses == dict.fromkeys(runs, "succeeded"), {
        r: (s, steps_of(conn, r), attempts_of(conn, r))
        for r, s in statuses.items()
        if s != "succeeded"
    }
    rows = conn.execute(
        """
        SELECT w.run_id, w.status::text, w.result, w.finished_at,
               w.finished_at >= (w.result ->> 'waited_until')::timestamptz,
               (SELECT count(*) FROM rara_attempts a WHERE a.step_id = w.id),
               (SELECT count(*) FROM rara_attempts a WHERE a.step_id = b.id
                  AND a.outcome = 'succeeded'),
               (SELECT min(a.started_at) FROM rara_attempts a WHERE a.step_id = b.id)
        FROM rara_steps w JOIN rara_steps b ON b.run_id = w.run_id AND b.key = 'b'
        WHERE w.key = 'w' AND w.run_id = ANY(%s)""",
        (runs,),
    ).fetchall()
    assert len(rows) == len(runs)
    for run_id, status, result, finished, in_time, attempts, b_wins, b_first in rows:
        kind = kinds[run_id]
        assert (status, attempts, b_wins) == ("succeeded", 0, 1), (run_id, kind)
        assert b_first > finished, f"run {run_id}: b leased before its wait ended"
        if kind == "timer":
            assert in_time, f"run {run_id}: fired before its time: {result}"
        elif kind == "signal":
            assert result["payload"] == {"run": run_id}, result
    signals = Counter(
        r[0]
        for r in conn.execute("SELECT run_id FROM rara_signals WHERE run_id = ANY(%s)", (runs,))
    )
    assert signals == Counter(r for r, k in kinds.items() if k == "signal")
    decided = dict(
        conn.execute(
            "SELECT run_id, decision FROM rara_approvals WHERE run_id = ANY(%s)", (runs,)
        ).fetchall()
    )
    assert decided == {r: "approved" for r, k in kinds.items() if k == "approval"}
    for run_id, said in answers.items():
        assert len(said) == sends, (run_id, said)
        refused = [a for a in said if isinstance(a, WaitRefused)]
        assert all("succeeded and not waiting" in str(a) for a in refused), refused
        said = [a for a in said if a not in refused]
        firsts = [a for a in said if getattr(a, "accepted", getattr(a, "recorded", None))]
        assert len(firsts) == 1, f"run {run_id}: {said}"
        assert len({a.step_id for a in said}) == 1
        when = {getattr(a, "sent_at", getattr(a, "decided_at", None)) for a in said}
        assert len(when) == 1, f"run {run_id}: the repeats answered another time: {said}"
    check_history(conn)


@pytest.mark.timeout(120)
def test_waits_end_once_while_workers_are_killed(
    conn: Conn, database_url: str, spawn: Spawn
) -> None:
    rng = random.Random(35)
    _define(conn, a="test.sleep@1", b="test.sleep@1")  # kills cut steps short too
    plan = (
        [(name, "timer") for name in TIMERS for _ in range(10)]
        + [("signalled", "signal")] * 30
        + [("gated", "approval")] * 10
    )
    rng.shuffle(plan)
    fleet = Fleet(spawn, "w", 3)
    senders = Senders(database_url)
    kinds: dict[int, str] = {}
    sent: set[int] = set()
    deadline = time.monotonic() + 75
    while plan or _unended(conn, list(kinds)):
        assert time.monotonic() < deadline, f"{_unended(conn, list(kinds))} runs never ended"
        for name, kind in plan[:10]:  # runs keep starting through the first kills
            kinds[_start(conn, name, {"seconds": 0.3})] = kind
        del plan[:10]
        for kind in ("signal", "approval"):
            for run_id in set(_waiting(conn, kind)) - sent:
                senders.send_twice(
                    run_id,
                    kind,
                    delay=rng.uniform(0.0, 1.5),
                    other_key=kind == "signal" and run_id % 2 == 0,
                )
                sent.add(run_id)
        time.sleep(rng.uniform(0.3, 1.3))  # the chaos's cadence, not a wait for a state
        fleet.kill(rng.randrange(3))
    answers = senders.join()
    assert fleet.kills >= 8, fleet.kills
    _assert_each_wait_ended_once(conn, kinds, answers)
    assert len(answers) == 40
    row = conn.execute(
        "SELECT (SELECT count(*) FROM rara_attempts WHERE outcome = 'lease_expired'),"
        " extract(epoch FROM max(finished_at - (result ->> 'waited_until')::timestamptz))"
        " FROM rara_steps WHERE wait ->> 'kind' = 'timer'"
    ).fetchone()
    assert row is not None
    lost, late = row
    assert late < 10.0  # a timer waits for its time, and at most for a worker to come back
    print(f"{len(kinds)} runs, {fleet.kills} SIGKILLs, {lost} leases expired; timers fired "
          f"{late:.2f} s after their time at the most")  # fmt: skip


@contextmanager
def _fresh(url: str, within: float = 60.0) -> Iterator[Conn]:
    """A connection of its own once the server answers again."""
    conn: Conn | None = wait_until(
        lambda: _connect_or_none(url), within, "the server to answer again"
    )
    assert conn is not None
    try:
        yield conn
    finally:
        conn.close()


def _connect_or_none(url: str) -> Conn | None:
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=2)
    except psycopg.OperationalError:
        return None


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[tuple[EmbeddedPostgres, str, Spawn]]:
    """A server of the test's own, durable (not the suite's ``fast`` one: a crash must lose no
    acknowledged commit, as a failover worth the name loses none), migrated; and ``spawn`` for
    worker processes on it (SIGKILLed at the end)."""
    if os.environ.get("RARA_TEST_DATABASE_URL"):
        pytest.skip("needs the embedded server's binaries (RARA_TEST_DATABASE_URL is set)")
    server = temporary_server(fast=False)
    url = server.up()
    procs: list[WorkerProcess] = []

    def spawn(worker_id: str, *, wait: bool = False, **settings: Any) -> WorkerProcess:
        log, artifacts = tmp_path / f"{worker_id}.log", tmp_path / "artifacts"
        procs.append(WorkerProcess(url, worker_id, log, artifact_root=artifacts, **settings))
        return procs[-1]

    try:
        migrate(url)
        yield server, url, spawn
    finally:
        for proc in procs:
            if proc.proc.poll() is None:
                proc.signal(signal.SIGKILL)
            proc.proc.wait(10)
        server.destroy()


@pytest.mark.timeout(120)
def test_timers_due_in_a_database_crash_fire_after_it(
    own_server: tuple[EmbeddedPostgres, str, Spawn],
) -> None:
    server, url, spawn = own_server
    with psycopg.connect(url, autocommit=True) as conn:
        _define(conn, timer="6s")
        fleet = Fleet(spawn, "o", 2)
        kinds = {_start(conn, "timer"): "timer" for _ in range(8)}
        kinds |= {_start(conn, "signalled"): "signal" for _ in range(6)}
        kinds |= {_start(conn, "gated"): "approval" for _ in range(4)}
        wait_until(
            lambda: [len(_waiting(conn, k)) for k in ("timer", "signal", "approval")] == [8, 6, 4],
            30,
            "every run to wait",
        )
        senders = Senders(url)
        before = [r for r, k in kinds.items() if k != "timer"][::2]  # half before, half after
        for run_id in before:
            senders.send_twice(run_id, kinds[run_id])
        senders.join()
        due = conn.execute(
            "SELECT now() + '0.5 s' < min(due_at), max(due_at),"
            " extract(epoch FROM max(due_at) - now())::float FROM rara_waits WHERE kind = 'timer'"
        ).fetchone()
    assert due is not None
    assert due[0], "a timer came due before the crash: the machine is too slow for this test"
    server.crash()  # pg_ctl stop -m immediate: every connection dropped, no checkpoint
    time.sleep(due[2] + 1.0)  # the outage itself, until every timer is due
    server.resume()
    with _fresh(url) as conn:
        row = conn.execute("SELECT pg_postmaster_start_time()").fetchone()
        assert row is not None
        back = row[0]
        assert back > due[1]  # every timer came due while the server was down
        wait_until(lambda: not _waiting(conn, "timer"), 30, "the timers due in the outage")
        row = conn.execute(
            "SELECT max(finished_at) FROM rara_steps WHERE key = 'w' AND wait ->> 'kind' = 'timer'"
        ).fetchone()
        assert row is not None
        late = (row[0] - back).total_seconds()
        after = [r for r, k in kinds.items() if k != "timer" and r not in before]
        for run_id in after:
            senders.send_twice(run_id, kinds[run_id])
        answers = senders.join()
        wait_until(lambda: not _unended(conn, list(kinds)), 30, "every run to end")
        assert fleet.alive(), [p.output() for p in fleet.procs]  # rode the outage out
        _assert_each_wait_ended_once(conn, kinds, answers)
    logs = "".join(p.log.read_text(errors="replace") for p in fleet.procs)
    assert "listen connection lost" in logs  # the workers did see the outage
    print(f"timers due in a {due[2] + 1:.1f} s outage fired {late:.2f} s after its end")


@pytest.mark.timeout(90)
def test_a_decision_made_twice_counts_once_across_a_worker_kill(
    conn: Conn, database_url: str, spawn: Spawn
) -> None:
    _define(conn, b="test.sleep@1")
    fleet = Fleet(spawn, "d", 2, concurrency=8)
    runs = [_start(conn, "gated", {"seconds": 1.5, "slow_attempts": 1}) for _ in range(6)]
    wait_until(lambda: len(_waiting(conn, "approval")) == 6, 30, "every gate to wait")
    answers: dict[int, list[Any]] = {r: [] for r in runs}
    errors: list[BaseException] = []
    together = threading.Barrier(2 * len(runs) + 1)

    def approve(run_id: int) -> None:
        try:
            with psycopg.connect(database_url, autocommit=True) as own:
                together.wait(10)
                answers[run_id].append(_send(own, run_id, "approval"))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    deciders = [threading.Thread(target=approve, args=(r,)) for r in runs for _ in range(2)]
    for thread in deciders:
        thread.start()
    together.wait(10)
    fleet.kill(0)  # as the decisions land
    for thread in deciders:
        thread.join(30)
    assert not errors, errors
    # And the worker that took up a gate's b, while it runs it: the b must run again, once.
    leased = wait_until(
        lambda: conn.execute(
            "SELECT leased_by FROM rara_steps WHERE key = 'b' AND status = 'running' LIMIT 1"
        ).fetchone(),
        30,
        "a b to be leased",
    )
    slot = fleet.slot_of(leased[0])
    assert slot is not None, leased
    fleet.kill(slot)
    wait_until(lambda: not _unended(conn, runs), 45, "every run to end")
    again = {r: _send(conn, r, "approval") for r in runs}  # after the kills: the first's answer
    for run_id, answer in again.items():
        assert not answer.recorded
        answers[run_id].append(answer)
    _assert_each_wait_ended_once(conn, dict.fromkeys(runs, "approval"), answers, sends=3)
    expired = conn.execute(
        "SELECT count(*) FROM rara_attempts a JOIN rara_steps s ON s.id = a.step_id "
        "WHERE s.key = 'b' AND a.outcome = 'lease_expired'"
    ).fetchone()
    assert expired is not None
    assert expired[0] >= 1  # the kill did cut a b short
