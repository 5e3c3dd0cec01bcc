"""Release and run triggers: pipelines of pipelines.

A `release` trigger starts a run for each promotion of the release it names (and each
rollback, with ``onRollback``), given the release's number and artifacts; a `run` trigger one
for each end of a run of the definition it names, in the states it names, given that run's id
and status. The database finds the events no pass has recorded (``rara_trigger_upstream``,
the trigger's own namespace only), by the move's or the run's id: the event's key.
"""

from __future__ import annotations

from typing import Any

import psycopg

from rara.pg import triggers as trigger_sql
from rara.pg.triggers import DueTrigger
from rara.triggers.model import ReleaseSpec, RunEndedSpec
from rara.triggers.starts import Found, PassCounts, start_watched

MAX_EVENTS_PER_PASS = 100  # more wait for the next pass, due at once


def watch_upstream(conn: psycopg.Connection[Any], trigger: DueTrigger, counts: PassCounts) -> Found:
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
