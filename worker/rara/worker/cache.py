"""The step cache, on the worker's side (docs/step-cache.md).

A leased step with ``cache:`` gets its key (``rara.cache``) before its handler is called. A
live entry with that key's base, whose step read nothing the new step is not given with the
same digest, is a hit only once every blob of its manifest has been read back
from the artifact store and matched its digest: the database cannot see the store, and a hit
whose artifacts are gone would fail every step downstream instead of recomputing one. A
missing or corrupt blob drops the entry and the step runs (a miss, never a failure); its
success writes a new entry. A store that cannot be reached is a miss that keeps the entry.

A verified hit ends the attempt ``succeeded`` with the entry's result and manifest and where
they came from, through the same fenced end as any success: no handler, no executor, no pod
(``reuse``). A miss claims its key first (``claim``, single flight): while another running
step computes the same key, this one is released until that one ended. Every statement goes
through the worker's store (``rara.worker.store``), the claim fenced like any write of an
attempt.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog

from rara.artifacts.api import ArtifactStore
from rara.artifacts.errors import ArtifactCorrupted, ArtifactError, ArtifactNotFound
from rara.cache import CacheKey, cache_key, entry_key, reads_of
from rara.namespaces import DEFAULT_NAMESPACE
from rara.pg import cache as cache_sql
from rara.states import AttemptOutcome, StepStatus
from rara.worker.attempt_io import AttemptIO
from rara.worker.store import WorkerStore
from rara.worker.vocabulary import ABANDONED, LOST, AttemptEnd, AttemptState, Ending, LeasedStep

log = structlog.get_logger("rara.worker")


def key_of(step: LeasedStep) -> CacheKey | None:
    """The cache key of a leased step, or None when its definition has no ``cache:``."""
    if step.payload.get("cache") is None:
        return None
    # (ctx.input: the run input in it is what the lease gave, the fields the step can read)
    # (the lease names each input twice, "<step>/<name>" and the bare name: the first only)
    upstream = {name: ref.digest for name, ref in step.inputs.items() if "/" in name}
    return cache_key(
        capability=step.capability,
        executor=step.executor,
        secrets=step.payload.get("secrets") or {},
        input=step.input,
        upstream=upstream,
        namespace=step.payload["cache"].get("namespace", DEFAULT_NAMESPACE),
    )


def entry_of(step: LeasedStep, key: CacheKey) -> dict[str, Any]:
    """What the step row records of its key (``rara_steps.cache``, for ``rara cache
    explain``: its parts, and its input fields' digests), its claim's key for single flight
    (``key``) and the entry's ttl."""
    ttl_ms = (step.payload.get("cache") or {}).get("ttl_ms")
    return {
        "key": key.claim,
        "base": key.base,
        "parts": dict(key.parts),
        "upstream": dict(key.upstream),
        "fields": dict(key.fields),
        "ttl_ms": ttl_ms,
    }


def with_reads(entry: Mapping[str, Any], reads: Iterable[str]) -> dict[str, Any]:
    """``entry`` (from entry_of) completed by the digests its step read: what its success
    writes as a new entry (rara_step_end_many), under the key of its base and its reads."""
    key = CacheKey(entry["base"], entry["parts"], entry["upstream"], entry.get("fields") or {})
    read = reads_of(key, reads)
    stored, parts = entry_key(key, read)
    return {**entry, "entry": stored, "entry_parts": parts, "reads": read}


class Verdict:
    HIT = "hit"
    MISS = "miss"  # no entry, or the store could not be read: the entry stays
    BROKEN = "broken"  # a blob is missing or corrupt: the entry is dropped


def verify(store: ArtifactStore, manifest: Sequence[Mapping[str, Any]]) -> str:
    """Read every blob of ``manifest`` back and check its digest (blocking: call in a thread).
    Reading is what catches a corrupt blob; an existence check alone would not."""
    with tempfile.TemporaryDirectory(prefix="rara-cache-verify-") as tmp:
        for i, artifact in enumerate(manifest):
            try:
                store.get_file(str(artifact["digest"]), Path(tmp) / str(i))
            except (ArtifactNotFound, ArtifactCorrupted):
                return Verdict.BROKEN
            except ArtifactError:
                return Verdict.MISS
            (Path(tmp) / str(i)).unlink(missing_ok=True)
    return Verdict.HIT


async def look_up(
    store: WorkerStore, artifacts: ArtifactStore, step: LeasedStep, key: CacheKey
) -> cache_sql.CacheEntry | None:
    """The entry to reuse for ``step``, verified; None: the step runs."""
    # (the step's namespace and capability, as its lease gave them: an entry is reused only
    # by steps of the namespace and capability whose step wrote it, migration 0026)
    entry = await store.find_cache_entry(key.base, key.upstream, step.namespace, step.capability)
    if entry is None:
        return None
    # (no artifacts, nothing to read: no thread hop)
    verdict = (
        await asyncio.to_thread(verify, artifacts, entry.manifest)
        if entry.manifest
        else Verdict.HIT
    )
    if verdict == Verdict.HIT:
        return entry
    log.warning(
        "cached artifacts could not be verified; the step runs",
        step_id=step.id,
        step_key=step.key,
        cache_key=entry.key,
        verdict=verdict,
    )
    if verdict == Verdict.BROKEN:
        await store.drop_cache_entries([entry.key])
    return None


def reused_from(entry: cache_sql.CacheEntry) -> dict[str, Any]:
    """Where a hit's result came from, as the step row records it."""
    return {
        "via": "cache",
        "cache_key": entry.key,
        "run": entry.source_run,
        "step": entry.source_step,
        "key": entry.step_key,
        "attempt": entry.source_attempt,
    }


async def reuse(
    state: AttemptState, key: CacheKey, io: AttemptIO, artifacts: ArtifactStore
) -> AttemptEnd | None:
    """A step with ``cache:`` ended from its verified entry, or None: it runs. A failed
    look-up is a miss: the cache saves work, it never costs a step."""
    step = state.step
    try:
        entry = await look_up(io.store, artifacts, step, key)
    except Exception:
        log.warning("cache look-up failed; the step runs", step_id=step.id, exc_info=True)
        return None
    if entry is None:
        return None
    ending = Ending(
        state.fence,
        step.run_id,
        AttemptOutcome.SUCCEEDED,
        result=entry.result,
        artifacts=list(entry.manifest),
        cache=entry_of(step, key),
        reused_from=reused_from(entry),
    )
    try:
        status = await io.end(ending)
    except Exception:
        log.exception("could not write a cache hit; its lease will expire", step_id=step.id)
        return ABANDONED
    finally:
        state.ended = True
    return LOST if status is None else AttemptEnd(AttemptOutcome.SUCCEEDED, status)


async def claim(state: AttemptState, store: WorkerStore) -> AttemptEnd | None:
    """Single flight for a miss (``WorkerStore.claim_cache``, fenced): None, compute it; else
    the end written: released until another step computing the same key has ended, or lost."""
    assert state.cache_entry is not None
    fence = state.fence
    try:
        claimed = await store.claim_cache(fence, state.cache_entry)
    except Exception:
        log.warning("cache claim failed; the step runs", step_id=fence.step_id, exc_info=True)
        return None
    if claimed:
        return None
    state.ended = True
    return LOST if claimed is None else AttemptEnd(AttemptOutcome.RELEASED, StepStatus.READY)
