"""Garbage collection of blobs no manifest, checkpoint, cache entry or release references, in
any artifact store.

Safe against writers: a blob younger than the grace period is kept (a step may have stored it
and not yet committed its manifest — storing the same bytes again refreshes the blob's mtime,
or on S3 its touch marker), and unfinished writes (temp files, multipart uploads) are removed
only once older than the grace too, and never while their writer may still be producing them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

from rara.artifacts.api import ArtifactStore
from rara.pg import artifacts as sql


@dataclass
class GcReport:
    kept_referenced: int = 0
    kept_young: int = 0
    deleted: list[str] = field(default_factory=list)
    deleted_bytes: int = 0
    tmp_removed: int = 0


def collect_garbage(
    conn: psycopg.Connection[Any],
    store: ArtifactStore,
    *,
    grace_seconds: float = 24 * 3600,
    dry_run: bool = False,
) -> GcReport:
    # Read the references *after* listing blobs would race a commit landing in between; read
    # them first: a blob referenced later than this read is younger than the grace anyway.
    referenced = sql.referenced(conn)
    horizon = time.time() - grace_seconds
    report = GcReport()
    for blob in store.iter_blobs():
        if blob.digest in referenced:
            report.kept_referenced += 1
        elif blob.mtime > horizon:
            report.kept_young += 1
        else:
            if not dry_run and store.delete(blob.digest):
                report.deleted_bytes += blob.size
            report.deleted.append(blob.digest)
    if report.deleted and not dry_run:
        sql.forget(conn, report.deleted)
    report.tmp_removed = store.remove_stale_temporaries(horizon, dry_run=dry_run)
    return report
