"""Starting and cancelling runs. (The parent aggregation that follows step changes is by the
runs' step counts: rara_run_count in db/functions/steps.sql, called by the functions that end
steps.)"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg.pq import TransactionStatus

from rara.definitions.inputs import check_run_input
from rara.definitions.parse import spec_from_object
from rara.errors import CapabilityUnavailable, InputInvalid, NotFound, RaraError, ResumeRefused
from rara.namespaces import DEFAULT_NAMESPACE, qualified
from rara.pg import definitions as definition_sql
from rara.pg import runs as run_sql
from rara.secrets import refuse_credentials

# The database's limit (rara_limits() run_input_bytes, db/functions/limits.sql), refused here
# first, without a round trip; measured as the database measures it: the JSON text's UTF-8 bytes.
MAX_INPUT_BYTES = 256 * 1024
LIVE_WORKER_SECONDS = 30.0

_K = TypeVar("_K")
_R = TypeVar("_R")
_V = TypeVar("_V")


@dataclass(frozen=True)
class StartedRun:
    run_id: int
    created: bool  # False: the idempotency key matched an existing run


def validate_input(value: Any) -> dict[str, Any]:
    """Run input is a JSON object of bounded size."""
    if not isinstance(value, dict):
        raise InputInvalid(f"run input must be a JSON object, got {type(value).__name__}")
    try:
        encoded = json.dumps(value, allow_nan=False, ensure_ascii=False).encode()
    except (TypeError, ValueError) as exc:
        raise InputInvalid(f"run input is not JSON-serialisable: {exc}") from exc
    if len(encoded) > MAX_INPUT_BYTES:
        raise InputInvalid(f"run input is {len(encoded)} bytes; the limit is {MAX_INPUT_BYTES}")
    refuse_credentials(value, "run input")
    return value


def start_run(
    conn: psycopg.Connection[Any],
    definition: str,
    *,
    version: int | None = None,
    input: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    queue_anyway: bool = False,
    namespace: str = DEFAULT_NAMESPACE,
) -> StartedRun:
    """Create a run of ``definition`` in ``namespace`` and its steps atomically; the same
    idempotency key in the same namespace → the same run. One statement (one round trip) when
    this process has seen the definition's spec before."""
    run_input = validate_input({} if input is None else input)
    if idempotency_key is not None and not (0 < len(idempotency_key) <= 200):
        raise InputInvalid("idempotency key must be 1..200 characters")
    with _atomic(conn):
        return _start(
            conn, _Name(namespace, definition), version, run_input, idempotency_key, queue_anyway
        )


def check_input(
    conn: psycopg.Connection[Any],
    definition: str,
    *,
    version: int | None = None,
    input: dict[str, Any] | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    filled_later: frozenset[str] = frozenset(),
) -> None:
    """Raise InputInvalid, as start_run would, when ``input`` is refused by a start of
    (definition, version) now: its bounds, and the input schemas of that version's steps (the
    latest version's when ``version`` is None). For what will start runs later (a schedule, a
    trigger) and wants its refusal now, not at each start. A definition (version) that does
    not exist yet checks only the bounds: whether it exists is the start's to say.
    ``filled_later``: the fields each start adds (a trigger's event's), not judged here."""
    run_input = validate_input({} if input is None else input)
    row = definition_sql.version_get(conn, definition, version, namespace=namespace)
    if row is not None:
        name = _Name(namespace, definition)
        check_run_input(run_input, _remember(name, version, row.digest, row.spec), filled_later)


def _atomic(conn: psycopg.Connection[Any]) -> AbstractContextManager[Any]:
    """In autocommit mode run_start is its own transaction (a cache miss inserts nothing, so
    its retry needs none either), and inside the caller's transaction it is part of it: no
    BEGIN/COMMIT round trips. An idle non-autocommit connection commits on return, as before."""
    if conn.autocommit or conn.info.transaction_status != TransactionStatus.IDLE:
        return nullcontext()
    return conn.transaction()


@dataclass(frozen=True, slots=True)
class _Name:
    """A definition's full name: its namespace and its name there."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return qualified(self.namespace, self.name)


def _start(
    conn: psycopg.Connection[Any],
    definition: _Name,
    version: int | None,
    run_input: dict[str, Any],
    idempotency_key: str | None,
    queue_anyway: bool,
) -> StartedRun:
    digest = _DIGEST_HINTS.get((definition, version))
    schemas = _INPUT_SCHEMAS.get(digest) if digest is not None else None
    for _ in range(2):
        if schemas is not None:
            # The input against the schemas of the very spec the statement starts only if its
            # digest is still current: nothing starts that its steps would refuse.
            check_run_input(run_input, schemas)
        try:
            row = run_sql.start(
                conn,
                namespace=definition.namespace,
                name=definition.name,
                version=version,
                digest=digest if schemas is not None else None,
                input=run_input,
                idempotency_key=idempotency_key,
                check_capabilities=not queue_anyway,
                alive_seconds=LIVE_WORKER_SECONDS,
            )
        except (psycopg.errors.InvalidParameterValue, psycopg.errors.ProgramLimitExceeded) as exc:
            # the input lacks what a step's rule reads (a concurrency key), or is over the
            # database's limit (rara_limits): nothing was written
            raise InputInvalid(exc.diag.message_primary or str(exc)) from None
        if row is None:
            what = f"{definition} version {version}" if version else definition
            raise NotFound(f"no workflow definition {what}")
        if row.retired_at is not None and version is None:
            raise NotFound(f"workflow definition {definition} is retired")
        if row.spec is None:  # our digest matched: the statement did (or refused) the start
            return _started(conn, definition.namespace, row.run_id, row.missing, idempotency_key)
        # Unknown or stale digest: nothing was inserted; learn the spec's schemas, go again.
        digest = row.digest
        schemas = _remember(definition, version, digest, row.spec)
    # Only a version applied between our two calls (latest wanted) gets here.
    raise RaraError(f"workflow definition {definition} changed while starting a run; try again")


def _started(
    conn: psycopg.Connection[Any],
    namespace: str,
    run_id: int | None,
    missing: list[str] | None,
    idempotency_key: str | None,
) -> StartedRun:
    if missing:  # only checked (and only refused) without queue_anyway
        raise CapabilityUnavailable(missing)
    if run_id is not None:
        return StartedRun(run_id, created=True)
    if idempotency_key is None:
        raise AssertionError("run_start inserted no run and reported no reason")
    # The key exists: read its run in a new statement. run_start's own snapshot predates a
    # concurrent winner's commit (ON CONFLICT waited for it but cannot return its row).
    existing = run_sql.id_by_key(conn, idempotency_key, namespace=namespace)
    if existing is None:
        raise AssertionError("run_start found the idempotency key taken but no run has it")
    return StartedRun(existing, created=False)


# What a run input is checked against, by spec digest, and the digest last seen per (namespace,
# name, version). The steps themselves the database builds from the version's spec (rara_run_start);
# the digest hashes the spec's content, so a cached entry is right for any database this
# process talks to (tests clone databases whose version ids repeat with other specs); a stale
# hint costs one call more.
_InputSchemas = list[tuple[str, dict[str, Any]]]  # (step key, JSON Schema of the run input)
_INPUT_SCHEMAS: dict[str, _InputSchemas] = {}
_DIGEST_HINTS: dict[tuple[_Name, int | None], str] = {}
_CACHE_LIMIT = 512  # entries per map; the oldest goes first (a process sees few definitions)
_CACHE_LOCK = threading.Lock()  # writers only: dict reads are atomic


def _remember(definition: _Name, version: int | None, digest: str, spec_json: Any) -> _InputSchemas:
    """The input schemas of the spec with this digest (parsed unless cached: only the hint was
    stale), cached with the hint for the next start of (definition, version)."""
    schemas = _INPUT_SCHEMAS.get(digest)
    if schemas is None:
        spec = spec_from_object(spec_json)
        schemas = [(s.key, s.input_schema) for s in spec.steps if s.input_schema is not None]
    with _CACHE_LOCK:
        _put(_INPUT_SCHEMAS, digest, schemas)
        _put(_DIGEST_HINTS, (definition, version), digest)
    return schemas


def _put(cache: dict[_K, _V], key: _K, value: _V) -> None:
    if key not in cache and len(cache) >= _CACHE_LIMIT:
        del cache[next(iter(cache))]
    cache[key] = value


def run_id_by_key(
    conn: psycopg.Connection[Any], idempotency_key: str, *, namespace: str = DEFAULT_NAMESPACE
) -> int | None:
    """The run started under this idempotency key in ``namespace`` (None: none was)."""
    return run_sql.id_by_key(conn, idempotency_key, namespace=namespace)


def resume_run(
    conn: psycopg.Connection[Any],
    run_id: int,
    *,
    definition: str | None = None,
    version: int | None = None,
    input: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    rerun_from: str | None = None,
) -> run_sql.ResumedRun:
    """Resume run ``run_id`` from its failure: a new run of its version and input in which
    every step that succeeded in it is reused, result and artifacts (docs/step-cache.md,
    "Resume"). With ``rerun_from`` (a step's key), that step and every step downstream of it
    run again, and any finished run may be re-run so. ``definition``, ``version`` and
    ``input``, when given, must be the run's: a resume that would compute with something
    else would mix two runs' results, so it is refused."""
    old = run_sql.get(conn, run_id)
    if old is None:
        raise NotFound(f"no run {run_id}")
    if definition is not None and definition != old.definition:
        raise ResumeRefused(
            f"run {run_id} ran {old.definition}, not {definition}: a resume reuses its steps "
            "only for the same definition version"
        )
    if version is not None and version != old.version:
        raise ResumeRefused(
            f"run {run_id} ran {old.definition} version {old.version}, not {version}: a resume "
            "reuses its steps only for the same version; start a new run instead"
        )
    if input is not None and input != old.input:
        raise ResumeRefused(
            f"run {run_id} ran with another input: a resume reuses its steps only for the "
            "same input; start a new run instead"
        )
    try:
        with _atomic(conn):
            return run_sql.resume(conn, run_id, idempotency_key, rerun_from)
    except (psycopg.errors.InvalidParameterValue, psycopg.errors.ProgramLimitExceeded) as exc:
        raise ResumeRefused(exc.diag.message_primary or str(exc)) from None


def cancel_run(conn: psycopg.Connection[Any], run_id: int, reason: str | None = None) -> bool:
    """Cancel waiting steps now; flag running ones (NOTIFY + heartbeat answer tell their worker).
    Returns False when the run had already ended. ``reason``: kept with who cancelled as the
    run's error (``rara.cancel_reason``, set for this transaction only: rara_run_cancel)."""

    def cancel() -> bool:
        if not reason:
            return _cancel_once(conn, run_id)
        with conn.transaction():
            conn.execute("SELECT set_config('rara.cancel_reason', %s, true)", (reason,))
            return _cancel_once(conn, run_id)

    return retrying_deadlocks(cancel)


def retrying_deadlocks(act: Callable[[], _R]) -> _R:
    """``act``, again when PostgreSQL aborted it as a deadlock (twice at most): an act on all
    of a run's steps (cancel, pause) takes their locks in id order, then the run's, as a step's
    end does; a step of an unusual graph (a dependant with a lower id than its dependency) can
    still cross lock orders with a completion."""
    for attempt in range(3):
        try:
            return act()
        except psycopg.errors.DeadlockDetected:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _cancel_once(conn: psycopg.Connection[Any], run_id: int) -> bool:
    cancelled = run_sql.cancel(conn, run_id)
    if cancelled is None:
        raise NotFound(f"no run {run_id}")
    return cancelled
