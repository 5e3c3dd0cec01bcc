"""Debounced webhook triggers: a due burst of events becomes one run.

A delivery to a trigger with ``debounce`` joins the open burst of its key
(``rara_trigger_batch_add``, in the delivery's transaction), which is due ``windowSeconds``
after its last event and at most ``maxDelaySeconds`` after its first. The watcher's pass takes
the due bursts FOR UPDATE SKIP LOCKED (``trigger_batch_claim``) and, for each, starts one run
given every event's input in arrival order, under the key ``trigger:<name>:batch-<id>``, and
closes the burst (``trigger_batch_close``) in the same transaction: a burst has one run,
however many watchers look or die.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from rara.pg import triggers as trigger_sql
from rara.pg.triggers import DueBatch
from rara.triggers.model import WebhookSpec
from rara.triggers.starts import PassCounts, run_key, start_refusable

log = logging.getLogger(__name__)

CLAIM_LIMIT = 20  # bursts per transaction; a pass goes on while it gets full batches
DEFAULT_FIELD = "events"  # a burst left open by a trigger whose debounce was removed since


def start_due_batches(conn: psycopg.Connection[Any], counts: PassCounts) -> None:
    """Every due burst of the caller's namespaces' debounced triggers, started."""
    while True:
        with conn.transaction():
            due = trigger_sql.batch_claim(conn, CLAIM_LIMIT)
            for batch in due:
                with conn.transaction():  # a savepoint: a failed start leaves the close
                    _start(conn, batch, counts)
        if len(due) < CLAIM_LIMIT:
            return


def _start(conn: psycopg.Connection[Any], batch: DueBatch, counts: PassCounts) -> None:
    debounce = WebhookSpec.model_validate(batch.config).debounce
    field = debounce.input_field if debounce is not None else DEFAULT_FIELD
    started = start_refusable(
        conn,
        namespace=batch.namespace,
        definition=batch.definition,
        version=batch.version,
        key=run_key(batch.trigger, f"batch-{batch.id}"),
        run_input=lambda: {**batch.input, field: batch.inputs},
    )
    if isinstance(started, str):
        log.warning(
            "trigger %s/%s: burst %d refused: %s", batch.namespace, batch.trigger, batch.id, started
        )
        counts.refused += 1
        trigger_sql.batch_close(conn, batch.id, run_id=None, reason=started)
        return
    counts.started += 1
    trigger_sql.batch_close(conn, batch.id, run_id=started.run_id, reason=None)
