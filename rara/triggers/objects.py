"""Watching objects: a pass over the due objects triggers starts one run per change of content,
and a loop runs passes until stopped (in `rara triggers serve`).

A pass takes the due triggers' rows FOR UPDATE SKIP LOCKED (``trigger_objects_claim``), so two
watchers never judge one trigger at once. For each, in a savepoint of its own, it lists the
source, reads the bytes of what has a fingerprint it has not seen (new objects, and objects
whose size, mtime or ETag moved), and compares their digests with what it recorded. Objects
whose digest is new make one event: a run starts, given them (``[{key, digest, size}]`` in the
trigger's ``inputField``), under the key ``trigger:<name>:objects-<pass>``, and the new digests
are recorded (``trigger_objects_decide``) in the same transaction. Killed before the commit, a
watcher leaves nothing and the next pass sees the same change; after it, the change is recorded
and no later pass sees it again. The same bytes written again, a second watcher, a restart:
none of them makes a second run. An object removed is no event.
"""

from __future__ import annotations

import fnmatch
import logging
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from rara.errors import InputInvalid, NotFound
from rara.pg import triggers as trigger_sql
from rara.pg.triggers import DueObjects, SeenObject
from rara.runs import start_run, validate_input
from rara.triggers.model import ObjectsSpec
from rara.triggers.sources import Source, SourceUnavailable, open_source

log = logging.getLogger(__name__)

CLAIM_LIMIT = 20  # triggers per transaction; a pass goes on while it gets full batches
MAX_SLEEP_SECONDS = 30.0  # a trigger applied meanwhile waits at most this long for its first pass
RETRY_SECONDS = 1.0  # after a failed pass (the database gone); doubled, up to:
MAX_BACKOFF_SECONDS = 60.0


@dataclass
class PassCounts:
    triggers: int = 0
    started: int = 0  # runs started
    unchanged: int = 0  # triggers whose objects did not change
    refused: int = 0  # changes whose run could not start (recorded as refused events)
    unavailable: int = 0  # triggers whose source could not be watched
    hashed: int = 0  # objects whose bytes were read


@dataclass
class Change:
    seen: list[SeenObject] = field(default_factory=list)  # to record: new fingerprints
    changed: list[SeenObject] = field(default_factory=list)  # of those, new digests
    more: bool = False  # over maxObjects: the rest wait for the next pass


def watch_due(conn: psycopg.Connection[Any], root: Path | None) -> PassCounts:
    """One pass over every due objects trigger of the caller's namespaces, in batches of
    CLAIM_LIMIT triggers, each batch one transaction and each trigger a savepoint in it.
    ``root``: the folder below which folder triggers are watched (None: none are)."""
    counts = PassCounts()
    while True:
        with conn.transaction():
            due = trigger_sql.objects_claim(conn, CLAIM_LIMIT)
            for trigger in due:
                _watch_alone(conn, trigger, root, counts)
        counts.triggers += len(due)
        if len(due) < CLAIM_LIMIT:
            return counts


def _watch_alone(
    conn: psycopg.Connection[Any], trigger: DueObjects, root: Path | None, counts: PassCounts
) -> None:
    """One trigger's pass in a savepoint: a source that cannot be watched is recorded as the
    trigger's watch error, and a conflict with another transaction leaves it for the next."""
    config = ObjectsSpec.model_validate(trigger.config)
    next_poll = trigger.db_now + timedelta(seconds=config.poll_seconds)
    try:
        with conn.transaction():
            change = _compare(conn, trigger, config, open_source(config.location, root), counts)
            if change.changed:
                _start(conn, trigger, config, change, counts)
            trigger_sql.objects_decide(
                conn,
                trigger.name,
                change.seen,
                changed=bool(change.changed),
                next_poll=trigger.db_now if change.more else next_poll,
                error=None,
                namespace=trigger.namespace,
            )
        if not change.changed:
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
    trigger_sql.objects_decide(
        conn,
        trigger.name,
        [],
        changed=False,
        next_poll=next_poll,
        error=reason,
        namespace=trigger.namespace,
    )


def _compare(
    conn: psycopg.Connection[Any],
    trigger: DueObjects,
    config: ObjectsSpec,
    source: Source,
    counts: PassCounts,
) -> Change:
    """What the source holds now that the trigger has not seen: by fingerprint first (no
    bytes read), then by digest."""
    before = trigger_sql.objects_seen(conn, trigger.name, namespace=trigger.namespace)
    change = Change()
    for item in source.listing():
        if config.include is not None and not fnmatch.fnmatchcase(item.key, config.include):
            continue
        old = before.get(item.key)
        if old is not None and old.fingerprint == item.fingerprint:
            continue
        if len(change.changed) >= config.max_objects:
            change.more = True
            break
        digest = source.digest(item.key)
        counts.hashed += 1
        seen = SeenObject(item.key, digest, item.size, item.fingerprint)
        change.seen.append(seen)
        if old is None or old.digest != digest:
            change.changed.append(seen)
    return change


def _start(
    conn: psycopg.Connection[Any],
    trigger: DueObjects,
    config: ObjectsSpec,
    change: Change,
    counts: PassCounts,
) -> None:
    """The change's run, and its event recorded. A refused start is recorded as a refused
    event, and the objects as seen all the same: the same bytes would be refused again, and a
    trigger fixed meanwhile starts a run at the next change."""
    event = f"objects-{trigger.passes + 1}"
    objects = [{"key": o.key, "digest": o.digest, "size": o.size} for o in change.changed]
    try:
        with conn.transaction():
            started = start_run(
                conn,
                trigger.definition,
                version=trigger.version,
                input=validate_input({**trigger.input, config.input_field: objects}),
                idempotency_key=f"trigger:{trigger.name}:{event}"[:200],
                queue_anyway=True,  # the fleet may be scaled to zero: the backlog wakes it
                namespace=trigger.namespace,
            )
    except (InputInvalid, NotFound) as exc:
        counts.refused += 1
        trigger_sql.record_event(
            conn, trigger.name, event, run_id=None, reason=str(exc), namespace=trigger.namespace
        )
        return
    counts.started += 1
    trigger_sql.record_event(
        conn, trigger.name, event, run_id=started.run_id, reason=None, namespace=trigger.namespace
    )


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
        due = trigger_sql.objects_next_due(conn)
        if due.next_poll is None:
            return MAX_SLEEP_SECONDS
        wait = (due.next_poll - due.db_now).total_seconds()
        return min(max(wait, 0.05), MAX_SLEEP_SECONDS)
