"""Objects triggers: one run per change of content in a folder or under an S3 prefix.

A pass lists the source, reads the bytes of what has a fingerprint it has not seen (new
objects, and objects whose size, mtime or ETag moved), and compares their digests with what it
recorded. Objects whose digest is new make one event: a run, given them (``[{key, digest,
size}]`` in the trigger's ``inputField``), under the event key ``objects-<pass>``; the new
digests are recorded in the same transaction (rara.triggers.watching ends the pass). The same
bytes written again start nothing; an object removed is no event.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any

import psycopg

from rara.pg import triggers as trigger_sql
from rara.pg.triggers import DueTrigger, SeenObject
from rara.triggers.model import ObjectsSpec
from rara.triggers.sources import Source, open_source
from rara.triggers.starts import Found, PassCounts, start_watched


def watch_objects(
    conn: psycopg.Connection[Any], trigger: DueTrigger, root: Path | None, counts: PassCounts
) -> Found:
    """The trigger's change since its last pass, started; SourceUnavailable when the source
    cannot be listed or read."""
    config = ObjectsSpec.model_validate(trigger.config)
    found, changed = _compare(conn, trigger, config, open_source(config.location, root), counts)
    if changed:
        objects = [{"key": o.key, "digest": o.digest, "size": o.size} for o in changed]
        start_watched(
            conn, trigger, f"objects-{trigger.passes + 1}", {config.input_field: objects}, counts
        )
        found.events = 1
    return found


def _compare(
    conn: psycopg.Connection[Any],
    trigger: DueTrigger,
    config: ObjectsSpec,
    source: Source,
    counts: PassCounts,
) -> tuple[Found, list[SeenObject]]:
    """What the source holds now that the trigger has not seen — by fingerprint first (no
    bytes read), then by digest — and, of that, what changed."""
    before = trigger_sql.objects_seen(conn, trigger.name, namespace=trigger.namespace)
    found = Found()
    changed: list[SeenObject] = []
    for item in source.listing():
        if config.include is not None and not fnmatch.fnmatchcase(item.key, config.include):
            continue
        old = before.get(item.key)
        if old is not None and old.fingerprint == item.fingerprint:
            continue
        if len(changed) >= config.max_objects:
            found.more = True
            break
        digest = source.digest(item.key)
        counts.hashed += 1
        seen = SeenObject(item.key, digest, item.size, item.fingerprint)
        found.seen.append(seen)
        if old is None or old.digest != digest:
            changed.append(seen)
    return found, changed
