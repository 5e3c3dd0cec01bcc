"""Release, run and stale triggers: pipelines of pipelines, and refreshes when data ages.

A `release` trigger starts a run for each promotion of the release it names (and each
rollback, with ``onRollback``), given the release's number and artifacts; a `run` trigger one
for each end of a run of the definition it names, in the states it names, given that run's id
and status. The database finds the events no pass has recorded (``rara_trigger_upstream``,
the trigger's own namespace only), by the move's or the run's id: the event's key. A `stale`
trigger starts one when a definition goes stale (rara.freshness), once per stale episode.
"""

from __future__ import annotations

from typing import Any

import psycopg

from rara.definitions.durations import format_duration_ms
from rara.freshness import freshness
from rara.pg import triggers as trigger_sql
from rara.pg.triggers import DueTrigger
from rara.triggers.model import ReleaseSpec, RunEndedSpec, StaleSpec
from rara.triggers.starts import Found, PassCounts, start_watched

MAX_EVENTS_PER_PASS = 100  # more wait for the next pass, due at once


def watch_upstream(conn: psycopg.Connection[Any], trigger: DueTrigger, counts: PassCounts) -> Found:
    if trigger.kind == "stale":
        return _watch_stale(conn, trigger, counts)
    config = (ReleaseSpec if trigger.kind == "release" else RunEndedSpec).model_validate(
        trigger.config
    )
    pending = trigger_sql.upstream(
        conn, trigger.name, MAX_EVENTS_PER_PASS + 1, namespace=trigger.namespace
    )
    found = Found(more=len(pending) > MAX_EVENTS_PER_PASS)
    for event in pending[:MAX_EVENTS_PER_PASS]:
        start_watched(conn, trigger, event.event_key, {config.input_field: event.payload}, counts)
        found.events += 1
    return found


def _watch_stale(conn: psycopg.Connection[Any], trigger: DueTrigger, counts: PassCounts) -> Found:
    """One run per stale episode of the definition: the episode is the run it is as old as
    (``stale-<run>``; ``stale-never`` while it has none), so a run that fails leaves it stale
    without a second start, and the next episode comes after a success that ages again."""
    config = StaleSpec.model_validate(trigger.config)
    judged = [
        f
        for f in freshness(conn, namespace=trigger.namespace, definition=config.definition)
        if f.kind == "definition"
    ]
    found = Found()
    if not judged or not judged[0].stale:
        return found
    old = judged[0]
    event = f"stale-{old.run_id or 'never'}"
    if trigger_sql.event_seen(conn, trigger.name, event, namespace=trigger.namespace):
        return found
    given = {
        "definition": old.definition,
        "maxAge": format_duration_ms(int(old.max_age.total_seconds() * 1000)),
        "ageSeconds": int(old.age.total_seconds()),
        "run": old.run_id,
    }
    start_watched(conn, trigger, event, {config.input_field: given}, counts)
    found.events = 1
    return found
