"""The fleet under test (worker and executor processes) and the seeded chaos driver.

``Service`` generalises ``rara_rag.demo.processes.Child``: a child process with its command line
kept, restartable, with a fresh identity per incarnation (``chaos-w0.3`` is the third life
of worker slot 0), so every attempt in ``rara_attempts`` names the exact process that ran it.

``ChaosDriver`` turns a seed into a plan (what happens when) before anything runs, so the same
``RARA_CHAOS_SEED`` replays the same plan; the timing of the fleet around it still varies.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]

WORKER_SIGKILL = "worker SIGKILL"
WORKER_SIGTERM = "worker SIGTERM"
EXECUTOR_SIGKILL = "executor SIGKILL"
POSTGRES_RESTART = "postgres restart"
KINDS = (WORKER_SIGKILL, WORKER_SIGTERM, EXECUTOR_SIGKILL, POSTGRES_RESTART)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Service:
    """One slot of the fleet: ``argv(identity)`` builds the command line of each incarnation."""

    slot: str
    argv: Callable[[str], list[str]]
    logs: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    generation: int = 0
    identity: str = ""
    started_at: float = 0.0

    def start(self) -> None:
        self.generation += 1
        self.identity = f"{self.slot}.{self.generation}"
        self.logs.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env, "RARA_WORKER_ID": self.identity}
        env.pop("PYTHONPATH", None)  # the installed rara, as a deployment runs it
        with open(self.logs / f"{self.identity}.log", "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, *self.argv(self.identity)],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started_at = time.time()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM and wait; SIGKILL after ``timeout``. The exit code (None: had to kill)."""
        if self.proc is None:
            return None
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                return None
        return self.proc.returncode

    def log_text(self, identity: str | None = None) -> str:
        path = self.logs / f"{identity or self.identity}.log"
        return path.read_text(errors="replace") if path.exists() else ""


@dataclass
class ChaosEvent:
    kind: str
    at: float  # time.time() when the signal was sent / the restart began
    victim: str  # the process identity (or "postgres")
    back_at: float | None = None  # when the replacement was started / the server was back
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "at": self.at,
            "victim": self.victim,
            "back_at": self.back_at,
            "note": self.note,
        }


@dataclass(frozen=True)
class PlannedAction:
    offset: float  # seconds after the chaos window opens
    kind: str
    slot_pick: float  # which live victim (a fraction of the live ones, resolved at run time)
    pause: float  # how long the slot stays down before it is started again


def make_plan(
    seed: int, seconds: float, *, postgres: bool, mean_interval: float = 2.5
) -> list[PlannedAction]:
    """A deterministic schedule: each kind at least once, the PostgreSQL restart once near the
    middle, the rest drawn with weights (worker SIGKILL is the commonest)."""
    rng = random.Random(seed)
    n = max(4, int(seconds / mean_interval))
    kinds = [WORKER_SIGKILL, WORKER_SIGTERM, EXECUTOR_SIGKILL]
    kinds += rng.choices(
        [WORKER_SIGKILL, WORKER_SIGTERM, EXECUTOR_SIGKILL], weights=[5, 3, 2], k=n - len(kinds)
    )
    rng.shuffle(kinds)
    # leave the last ~15% of the window quiet-ish so the last victims are back before the drain
    offsets = sorted(rng.uniform(0.03, 0.85) * seconds for _ in kinds)
    plan = [
        PlannedAction(o, k, rng.random(), rng.uniform(0.2, 1.5))
        for o, k in zip(offsets, kinds, strict=True)
    ]
    if postgres:
        plan.append(PlannedAction(rng.uniform(0.35, 0.65) * seconds, POSTGRES_RESTART, 0.0, 0.0))
    return sorted(plan, key=lambda a: a.offset)


class ChaosDriver:
    """Carries out a plan in a thread; restarts victims after their pause; records events."""

    def __init__(
        self,
        plan: list[PlannedAction],
        *,
        workers: list[Service],
        executor: Service,
        restart_postgres: Callable[[], None] | None,
        log: Callable[[str], None] = print,
    ) -> None:
        self.plan = plan
        self.workers = workers
        self.executor = executor
        self.restart_postgres = restart_postgres
        self.events: list[ChaosEvent] = []
        self.errors: list[str] = []
        self.log = log
        self._restarts: list[tuple[float, Service, ChaosEvent, bool]] = []  # due, svc, event, term
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="chaos", daemon=True)
        self.opened_at = 0.0

    def start(self) -> None:
        self.opened_at = time.time()
        self._thread.start()

    def stop(self) -> None:
        """End the window: no more actions; every victim comes back now."""
        self._stop.set()
        self._thread.join(timeout=120)
        for _, svc, event, _ in self._restarts:
            if svc.alive():  # a SIGTERMed one still shutting down
                svc.stop(15.0)
            svc.start()
            event.back_at = time.time()
        self._restarts.clear()

    def _main(self) -> None:
        try:
            pending = list(self.plan)
            while not self._stop.is_set():
                now = time.time()
                self._due_restarts(now)
                while pending and self.opened_at + pending[0].offset <= now:
                    if not self._act(pending[0]):
                        # Every victim of its kind is down (killed just before, not back
                        # yet): the action waits for one to be back rather than being lost,
                        # so the plan's every kind happens in the window.
                        break
                    pending.pop(0)
                self._stop.wait(0.05)
            for action in pending:
                self.log(f"chaos: {action.kind} not done (no live victim before the end)")
        except Exception as exc:  # surfaced by the test
            self.errors.append(repr(exc))
            raise

    def _due_restarts(self, now: float) -> None:
        keep = []
        for due, svc, event, terminated in self._restarts:
            if terminated and svc.alive():
                if now > event.at + 20:
                    self.errors.append(f"{svc.identity} ignored SIGTERM for 20 s; SIGKILL")
                    svc.kill()
                keep.append((due, svc, event, terminated))
                continue
            if terminated and event.note == "":
                assert svc.proc is not None
                event.note = f"exit {svc.proc.returncode} after {now - event.at:.1f}s"
                due = now + (due - event.at)  # the pause counts from the exit
            if now < due:
                keep.append((due, svc, event, terminated))
                continue
            svc.start()
            event.back_at = time.time()
        self._restarts = keep

    def _act(self, action: PlannedAction) -> bool:
        """Do ``action``: False when it has no live victim now (it is tried again)."""
        if action.kind == POSTGRES_RESTART:
            if self.restart_postgres is None:
                return True
            event = ChaosEvent(POSTGRES_RESTART, time.time(), "postgres")
            self.events.append(event)
            self.log(f"chaos +{event.at - self.opened_at:5.1f}s  {POSTGRES_RESTART}")
            self.restart_postgres()
            event.back_at = time.time()
            return True
        down = {svc.slot for _, svc, _, _ in self._restarts}
        if action.kind == EXECUTOR_SIGKILL:
            candidates = [self.executor] if self.executor.slot not in down else []
        else:
            candidates = [w for w in self.workers if w.slot not in down and w.alive()]
        if not candidates:
            return False
        victim = candidates[int(action.slot_pick * len(candidates))]
        event = ChaosEvent(action.kind, time.time(), victim.identity)
        self.events.append(event)
        terminated = action.kind == WORKER_SIGTERM
        if terminated:
            victim.signal(signal.SIGTERM)
        else:
            victim.kill()
        self.log(
            f"chaos +{event.at - self.opened_at:5.1f}s  {action.kind} {victim.identity}"
            f" (back in {action.pause:.1f}s)"
        )
        self._restarts.append((event.at + action.pause, victim, event, terminated))
        return True
