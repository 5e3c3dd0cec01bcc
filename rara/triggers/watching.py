"""Watching triggers: a pass over the due watched triggers (objects, release, run) starts one
run per event, and the due bursts of debounced webhooks one run each (rara.triggers.debounce);
a loop runs passes until stopped (in `rara triggers serve`).

A pass takes the due triggers' rows FOR UPDATE SKIP LOCKED (``trigger_watch_claim``), so two
watchers never judge one trigger at once. Each trigger is watched in a savepoint of its own
(rara.triggers.objects, rara.triggers.upstream): its events' runs start under their keys, the
events and what the pass saw are recorded, and the next pass is set (``trigger_watch_decide``),
all in one transaction. Killed before the commit, a watcher leaves nothing and the next pass
finds the same events; after it, they are recorded and no later pass finds them again.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from rara.pg import triggers as trigger_sql
from rara.pg.triggers import DueTrigger
from rara.triggers.debounce import start_due_batches
from rara.triggers.objects import watch_objects
from rara.triggers.sources import SourceUnavailable
from rara.triggers.starts import Found, PassCounts
from rara.triggers.upstream import watch_upstream

log = logging.getLogger(__name__)

CLAIM_LIMIT = 20  # triggers per transaction; a pass goes on while it gets full batches
MAX_SLEEP_SECONDS = 30.0  # a trigger applied meanwhile waits at most this long for its first pass
RETRY_SECONDS = 1.0  # after a failed pass (the database gone); doubled, up to:
MAX_BACKOFF_SECONDS = 60.0
DEFAULT_POLL_SECONDS = 30


def watch_due(conn: psycopg.Connection[Any], root: Path | None) -> PassCounts:
    """One pass over every due watched trigger of the caller's namespaces, in batches of
    CLAIM_LIMIT triggers, each batch one transaction and each trigger a savepoint in it.
    ``root``: the folder below which folder triggers are watched (None: none are)."""
    counts = PassCounts()
    while True:
        with conn.transaction():
            due = trigger_sql.watch_claim(conn, CLAIM_LIMIT)
            for trigger in due:
                _watch_alone(conn, trigger, root, counts)
        counts.triggers += len(due)
        if len(due) < CLAIM_LIMIT:
            break
    start_due_batches(conn, counts)
    return counts


def _watch_alone(
    conn: psycopg.Connection[Any], trigger: DueTrigger, root: Path | None, counts: PassCounts
) -> None:
    """One trigger's pass in a savepoint: a source that cannot be watched, or any failure of
    this trigger's, is recorded as its watch error (the others go on), and a conflict with
    another transaction leaves it for the next pass."""
    poll = int(trigger.config.get("pollSeconds", DEFAULT_POLL_SECONDS))
    next_poll = trigger.db_now + timedelta(seconds=poll)
    try:
        with conn.transaction():
            found = _watch(conn, trigger, root, counts)
            trigger_sql.watch_decide(
                conn,
                trigger.name,
                found.seen,
                changed=found.events > 0,
                next_poll=trigger.db_now if found.more else next_poll,
                error=None,
                namespace=trigger.namespace,
            )
        if not found.events:
            counts.unchanged += 1
        return
    except psycopg.errors.TransactionRollback as exc:  # before OperationalError, its base
        log.warning("trigger %s/%s: rolled back (%s)", trigger.namespace, trigger.name, exc)
        return
    except psycopg.OperationalError:
        raise  # the connection's: the whole pass's
    except SourceUnavailable as exc:
        reason = str(exc)
    except Exception as exc:  # one trigger's failure never stops the others
        log.exception("trigger %s/%s: pass failed", trigger.namespace, trigger.name)
        reason = f"watching failed: {type(exc).__name__}: {exc}"
    log.warning("trigger %s/%s cannot watch: %s", trigger.namespace, trigger.name, reason)
    counts.unavailable += 1
    trigger_sql.watch_decide(
        conn,
        trigger.name,
        [],
        changed=False,
        next_poll=next_poll,
        error=reason,
        namespace=trigger.namespace,
    )


def _watch(
    conn: psycopg.Connection[Any], trigger: DueTrigger, root: Path | None, counts: PassCounts
) -> Found:
    if trigger.kind == "objects":
        return watch_objects(conn, trigger, root, counts)
    return watch_upstream(conn, trigger, counts)


class Watcher:
    """Passes until ``stop``: sleeps until the earliest due pass (at most MAX_SLEEP_SECONDS),
    and after a failed pass (the database gone) retries with a backoff."""

    def __init__(self, url: str, root: Path | None) -> None:
        self.url = url
        self.root = root
        self.stopping = threading.Event()

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        backoff = RETRY_SECONDS
        while not self.stopping.is_set():
            try:
                with psycopg.connect(
                    self.url, autocommit=True, application_name="rara triggers watch"
                ) as conn:
                    while not self.stopping.is_set():
                        counts = watch_due(conn, self.root)
                        if counts.started or counts.refused:
                            log.info("objects pass: %s", counts)
                        backoff = RETRY_SECONDS
                        self.stopping.wait(self._sleep(conn))
            except Exception:
                log.exception("objects pass failed; again in %.0f s", backoff)
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)

    @staticmethod
    def _sleep(conn: psycopg.Connection[Any]) -> float:
        due = trigger_sql.watch_next_due(conn)
        if due.next_poll is None:
            return MAX_SLEEP_SECONDS
        wait = (due.next_poll - due.db_now).total_seconds()
        return min(max(wait, 0.05), MAX_SLEEP_SECONDS)
