"""Attempts on a timeline: one row per step, one bar per attempt, gaps between bars are the
retry backoff (or the wait for a free worker). Scaled on the server into SVG coordinates.

A step reused from the cache or by a resume gets a mark saying so where it ended: after its
one short attempt (a cache hit takes a lease), or alone on its row (a resumed step never ran
in this run: no attempt, it succeeded when the run was made)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rara.ui.data import AttemptLine
from rara.ui.reuse import Reuse

WIDTH = 900
ROW_H = 22
LABEL_W = 160
MAX_ROWS = 300
# Tick spacings of the time axis, in seconds: the first that leaves at least TICK_W px apart.
TICK_STEPS = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200)
TICK_W = 90
MARK_LABEL_W = 140  # room a mark's label takes right of it; nearer the edge it goes left


@dataclass(frozen=True, slots=True)
class Bar:
    key: str
    attempt: int
    outcome: str
    x: float
    width: float
    y: int
    title: str


@dataclass(frozen=True, slots=True)
class Mark:
    """A reused step's badge on its row: at ``x``, its label right of it (or left, by the
    edge: ``anchor`` end)."""

    key: str
    x: float
    y: int
    label: str
    title: str
    href: str | None
    anchor: str  # start | end
    via: str  # cache | resume


@dataclass(frozen=True, slots=True)
class Reused:
    """A reused step as the timeline needs it: its badge and when it succeeded."""

    key: str
    reuse: Reuse
    at: datetime | None


@dataclass(frozen=True, slots=True)
class Timeline:
    bars: list[Bar]
    rows: list[tuple[str, int]]  # step key, y
    width: int
    height: int
    label_w: int
    start: datetime | None
    seconds: float
    truncated: int  # steps left out past MAX_ROWS
    ticks: list[tuple[float, str]] = field(default_factory=list)  # x, UTC time
    marks: list[Mark] = field(default_factory=list)


def _ticks(start: datetime, seconds: float, scale: float) -> list[tuple[float, str]]:
    """The time axis: round UTC instants, at least TICK_W px apart."""
    step = next((s for s in TICK_STEPS if s * scale >= TICK_W), TICK_STEPS[-1])
    epoch = start.timestamp()
    first = -(-epoch // step) * step  # the first multiple of step at or after start
    ticks = []
    at = first
    while at <= epoch + seconds:
        instant = datetime.fromtimestamp(at, UTC)
        label = f"{instant:%H:%M:%S.%f}"[:-5] if step < 1 else f"{instant:%H:%M:%S}"
        ticks.append((round(LABEL_W + (at - epoch) * scale, 1), label))
        at += step
    return ticks


def _title(a: AttemptLine, now: datetime) -> str:
    end = a.ended_at or now
    took = (end - a.started_at).total_seconds()
    text = (
        f"{a.key} attempt {a.attempt} on {a.worker}: {a.outcome}, {took:.2f}s "
        f"(lease taken {a.started_at:%H:%M:%S.%f}"[:-3]
    )
    if a.ended_at is not None:
        text += f", ended {a.ended_at:%H:%M:%S} by {a.ended_by or '?'}"
    return text + ")"


def timeline(
    attempts: Sequence[AttemptLine],
    now: datetime,
    reused: Sequence[Reused] = (),
    position: Callable[[str], Any] | None = None,
) -> Timeline:
    """``position``: a step key's place among the run's steps (sort key), so that a reused
    step without attempts gets its row where its step is, not after the others."""
    keys: list[str] = []
    for a in attempts:
        if not keys or keys[-1] != a.key:
            keys.append(a.key)
    marked = {r.key: r for r in reused if r.at is not None}
    known = set(keys)
    keys += [k for k in marked if k not in known]
    if position is not None:
        keys.sort(key=position)
    shown = keys[:MAX_ROWS]
    y_of = {k: i * ROW_H for i, k in enumerate(shown)}
    kept = [a for a in attempts if a.key in y_of]
    marks_kept = [r for r in marked.values() if r.key in y_of]
    if not kept and not marks_kept:
        return Timeline([], [], WIDTH, 0, LABEL_W, None, 0.0, 0)
    starts = [a.started_at for a in kept] + [r.at for r in marks_kept if r.at is not None]
    ends = [(a.ended_at or now) for a in kept] + [r.at for r in marks_kept if r.at is not None]
    start, end = min(starts), max(ends)
    seconds = max((end - start).total_seconds(), 0.001)
    scale = (WIDTH - LABEL_W - 10) / seconds
    bars = []
    for a in kept:
        x = LABEL_W + (a.started_at - start).total_seconds() * scale
        width = max(((a.ended_at or now) - a.started_at).total_seconds() * scale, 2.0)
        bars.append(
            Bar(
                a.key,
                a.attempt,
                a.outcome,
                round(x, 1),
                round(width, 1),
                y_of[a.key] + 3,
                _title(a, now),
            )
        )
    bar_end: dict[str, float] = {}
    for b in bars:
        bar_end[b.key] = max(bar_end.get(b.key, 0.0), b.x + b.width)
    return Timeline(
        bars,
        [(k, y_of[k]) for k in shown],
        WIDTH,
        len(shown) * ROW_H,
        LABEL_W,
        start,
        seconds,
        len(keys) - len(shown),
        _ticks(start, seconds, scale),
        [_mark(r, start, scale, y_of[r.key], bar_end.get(r.key)) for r in marks_kept],
    )


def _mark(reused: Reused, start: datetime, scale: float, y: int, bar_end: float | None) -> Mark:
    """After the step's last bar (a cache hit's attempt), else where it succeeded."""
    assert reused.at is not None
    at = LABEL_W + (reused.at - start).total_seconds() * scale
    x = round(at if bar_end is None else bar_end + 6, 1)
    r = reused.reuse
    anchor = "end" if x > WIDTH - MARK_LABEL_W else "start"
    return Mark(reused.key, x, y + 3, r.label, r.title, r.href, anchor, r.via)
