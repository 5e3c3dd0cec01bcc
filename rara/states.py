"""The two state machines, defined once. The database enforces the same tables
(``rara_step_transition_allowed`` / ``rara_run_transition_allowed`` in migration 0001); a test
checks every (from, to) pair against both.

Run:  pending → running → succeeded | failed | cancelled;  pending → cancelled
Step: blocked → ready → running → succeeded | failed | cancelled;  running → ready (retry,
      lease expired, lease released);  blocked | ready → cancelled
      A step that runs nothing (a map step, a wait or approval step) ends from blocked:
      blocked → succeeded | failed (UNLEASED_STEP_TRANSITIONS)
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in _RUN_TERMINAL


class StepStatus(StrEnum):
    BLOCKED = "blocked"
    READY = "ready"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in _STEP_TERMINAL


class AttemptOutcome(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    LEASE_EXPIRED = "lease_expired"
    RELEASED = "released"
    CANCELLED = "cancelled"


_RUN_TERMINAL = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED})
_STEP_TERMINAL = frozenset({StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.CANCELLED})

RUN_TRANSITIONS: frozenset[tuple[RunStatus, RunStatus]] = frozenset(
    {
        (RunStatus.PENDING, RunStatus.RUNNING),
        (RunStatus.PENDING, RunStatus.CANCELLED),
        (RunStatus.RUNNING, RunStatus.SUCCEEDED),
        (RunStatus.RUNNING, RunStatus.FAILED),
        (RunStatus.RUNNING, RunStatus.CANCELLED),
    }
)

STEP_TRANSITIONS: frozenset[tuple[StepStatus, StepStatus]] = frozenset(
    {
        (StepStatus.BLOCKED, StepStatus.READY),
        (StepStatus.BLOCKED, StepStatus.CANCELLED),
        (StepStatus.READY, StepStatus.RUNNING),
        (StepStatus.READY, StepStatus.CANCELLED),
        (StepStatus.RUNNING, StepStatus.SUCCEEDED),
        (StepStatus.RUNNING, StepStatus.FAILED),
        (StepStatus.RUNNING, StepStatus.CANCELLED),
        (StepStatus.RUNNING, StepStatus.READY),
    }
)
# A map step (migration 0008) is never leased: it ends from blocked, when its children did. A
# wait or approval step (0021) neither: it ends from blocked, when its time, signal or
# decision came (while it waits, a row of rara_waits says so; its status stays blocked).
UNLEASED_STEP_TRANSITIONS: frozenset[tuple[StepStatus, StepStatus]] = STEP_TRANSITIONS | {
    (StepStatus.BLOCKED, StepStatus.SUCCEEDED),
    (StepStatus.BLOCKED, StepStatus.FAILED),
}


class IllegalTransition(ValueError):
    pass


def check_run_transition(old: RunStatus, new: RunStatus) -> None:
    if (old, new) not in RUN_TRANSITIONS:
        raise IllegalTransition(f"illegal run transition {old} -> {new}")


def check_step_transition(old: StepStatus, new: StepStatus) -> None:
    if (old, new) not in STEP_TRANSITIONS:
        raise IllegalTransition(f"illegal step transition {old} -> {new}")
