"""The scaling decision for one WorkerPool, as a pure function (no clock, no API calls).

desired = clamp(ceil(backlog / targetBacklogPerReplica), minReplicas, maxReplicas).
Up: at once — waiting steps cost latency. Down: only after fewer replicas have sufficed for
``cooldown`` seconds without a break, and then to the most that was asked for during that
window (the stabilisation window of the HorizontalPodAutoscaler), so a backlog that dips
between bursts does not make replicas flap. The window lives in the pool's status
(``scaleDownSince`` / ``scaleDownTo``), which keeps this function pure and the operator
restartable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Policy:
    min_replicas: int
    max_replicas: int
    target_backlog_per_replica: int
    cooldown_seconds: float


@dataclass(frozen=True)
class Window:
    """Fewer replicas would have done since ``since``; ``peak`` is the most asked for then."""

    since: datetime
    peak: int


@dataclass(frozen=True)
class Decision:
    desired: int  # what the backlog alone asks for
    replicas: int  # what the Deployment should be set to now
    window: Window | None  # the scale-down window to remember, None when there is none
    reason: str

    def changes(self, current: int) -> bool:
        return self.replicas != current


def desired_replicas(policy: Policy, backlog: int) -> int:
    wanted = math.ceil(max(backlog, 0) / policy.target_backlog_per_replica)
    return max(policy.min_replicas, min(policy.max_replicas, wanted))


def decide(
    policy: Policy, *, backlog: int, current: int, now: datetime, window: Window | None
) -> Decision:
    desired = desired_replicas(policy, backlog)
    if desired >= current:
        # Enough or too few: scale up now (or hold); any scale-down window is over.
        reason = f"backlog {backlog} needs {desired}" + (" (scale up)" if desired > current else "")
        return Decision(desired, desired, None, reason)
    if window is None:
        window = Window(since=now, peak=desired)
    else:
        window = Window(since=window.since, peak=max(window.peak, desired))
    # A window that started when more replicas were running is still valid: it only says
    # that `peak` replicas have sufficed since `since`.
    peak = min(window.peak, current)
    waited = (now - window.since).total_seconds()
    if waited >= policy.cooldown_seconds:
        return Decision(
            desired,
            peak,
            None,
            f"backlog {backlog} needs {desired}; {peak} sufficed for {waited:.0f}s (scale down)",
        )
    left = policy.cooldown_seconds - waited
    return Decision(
        desired,
        current,
        Window(window.since, peak),
        f"backlog {backlog} needs {desired}; cooldown {left:.0f}s left",
    )
