"""The worker's Prometheus metrics (``rara.metrics``), labelled by capability only. The gauge of
attempts running is read when scraped (``rara.worker.slots``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rara import metrics
from rara.worker.vocabulary import AttemptEnd, LeasedStep, Unwritten


class WorkerMetrics:
    """The labelled children are cached so the hot path does no label lookups."""

    def __init__(self) -> None:
        self._leases: dict[str, Any] = {}
        self._completions: dict[tuple[str, str], Any] = {}
        self._retries: dict[str, Any] = {}
        self._durations: dict[str, Any] = {}

    def leased(self, steps: Sequence[LeasedStep]) -> None:
        counts: dict[str, int] = {}
        for step in steps:
            counts[step.capability] = counts.get(step.capability, 0) + 1
        for capability, n in counts.items():
            child = self._leases.get(capability)
            if child is None:
                child = self._leases[capability] = metrics.LEASES.labels(capability)
            child.inc(n)

    def ended(self, capability: str, end: AttemptEnd, seconds: float) -> None:
        """``end``: what the supervisor wrote; its outcome labels the completion."""
        outcome = end.outcome.value
        key = (capability, outcome)
        child = self._completions.get(key)
        if child is None:
            child = self._completions[key] = metrics.COMPLETIONS.labels(capability, outcome)
        child.inc()
        if end.retried:
            retry = self._retries.get(capability)
            if retry is None:
                retry = self._retries[capability] = metrics.RETRIES.labels(capability)
            retry.inc()
        elif end.outcome is Unwritten.LEASE_LOST:
            metrics.LEASES_LOST.inc()
        duration = self._durations.get(capability)
        if duration is None:
            duration = self._durations[capability] = metrics.STEP_DURATION.labels(capability)
        duration.observe(seconds)
