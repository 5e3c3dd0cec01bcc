"""WorkflowRun status sync: per tick, one read for every unfinished WorkflowRun, and a status
patch only for those whose status changed (issue 15; docs/operator.md, "Mirroring the
status of WorkflowRuns").

A kopf timer per WorkflowRun did its own database read and its own status patch, each in
kopf's per-object workers; with 100 WorkflowRuns on a loaded node they competed with the
create handlers of new ones, which then started late. Now two parts share the work:

- **Who is mirrored: a kopf daemon per unfinished WorkflowRun that does no I/O.** It puts
  the object's live body (kopf refreshes it on every watch event) into ``RunSync.tracked``
  and waits until kopf stops it: when the run ends (its ``when`` filter stops matching a
  terminal phase), when the resource is deleted, and when peering pauses this replica. kopf's
  daemon killer stops every daemon on a pause, and the LIST after the resume spawns them
  again (kopf/_core/engines/daemons.py, ``daemon_killer``). So ``tracked`` holds exactly
  what this replica should mirror now, and nothing at all on a paused standby.
- **The work: one asyncio task**, started on startup and stopped by an event on cleanup,
  which ticks every ``run_sync_interval``: it snapshots the tracked bodies, then (in a
  thread, the pool and the API client being sync) reads all their runs with one statement
  (``run_status_many``) and patches the status of each WorkflowRun whose mirrored fields
  differ, ``PATCH_CONCURRENCY`` at a time, with an Event when the phase changed
  (rara.operator.events). No tracked WorkflowRun with a run: no read; no change: no patch.
  A snapshot taken before the watch event of the tick's own patch arrives patches the same
  values again: harmless, and rare at one tick a second or slower; its Event is not posted
  twice (``RunSync.announced``).

Why not one kopf daemon on a singleton object: no object exists once per served namespace
that the chart's RBAC lets the operator watch in every mode (a namespace needs a cluster-wide
watch; the KopfPeering object exists only when peered). Why not the task alone: kopf tells
no handler whether it is paused, and guessing from the peering object would be a second,
drifting copy of kopf's rule. The daemons borrow kopf's own pause, and cost an idle
coroutine each.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import kopf
from kubernetes.client import CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from rara import metrics
from rara.operator import events
from rara.operator.models import GROUP, VERSION
from rara.operator.runs import SETTLED, TERMINAL, changed_status, mirrored_status, phase_event
from rara.operator.runtime import Runtime, runtime_of
from rara.pg import runs as pg_runs

PLURAL = "workflowruns"
KIND = "WorkflowRun"
MERGE_PATCH = "application/merge-patch+json"
# Status patches in flight per tick. One at a time, 90 of them took 3.6 s (40 ms each) with
# the API server on the same loaded 2 cores: a tick's patches overlap their round trips.
PATCH_CONCURRENCY = 8

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Target:
    """A tracked WorkflowRun at the tick: where it is, its run, its status as last seen."""

    namespace: str
    name: str
    uid: str
    run_id: int
    status: dict[str, Any]

    def ref(self) -> dict[str, str]:
        """The WorkflowRun as an Event's involvedObject."""
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
        }


@dataclass
class RunSync:
    """What the daemons and the tick share (in kopf's memo): the live bodies by uid."""

    tracked: dict[str, kopf.Body] = field(default_factory=dict)
    # The phase each target's last Event told, by uid: only the tick's thread touches it.
    announced: dict[str, str] = field(default_factory=dict)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    def targets(self) -> list[Target]:
        """The tracked WorkflowRuns that have a run and have not ended, as they are now."""
        found = []
        for body in list(self.tracked.values()):
            status = dict(body.status)
            run_id = status.get("runId")
            if run_id is None or status.get("phase") in TERMINAL:
                continue  # not started yet (create handler pending), or ended
            found.append(
                Target(
                    str(body.meta.namespace),
                    str(body.meta.name),
                    str(body.meta.uid),
                    int(run_id),
                    status,
                )
            )
        return found


def unfinished(status: kopf.Status, **_: Any) -> bool:
    """The daemon's filter: a WorkflowRun whose run has not ended (or that may yet start)."""
    return status.get("phase") not in SETTLED


async def track_workflow_run(
    body: kopf.Body, uid: str, memo: kopf.Memo, stopped: kopf.DaemonStopped, **_: Any
) -> None:
    """Daemon: the WorkflowRun is mirrored while this runs (see the module's docstring)."""
    sync = sync_of(memo)
    sync.tracked[uid] = body
    metrics.RUN_SYNC_TRACKED.set(len(sync.tracked))
    try:
        await stopped.wait()
    finally:
        sync.tracked.pop(uid, None)
        metrics.RUN_SYNC_TRACKED.set(len(sync.tracked))


def start(memo: kopf.Memo, interval: float) -> None:
    """On startup, in kopf's event loop: the tick task."""
    sync = RunSync()
    memo.run_sync = sync
    sync.task = asyncio.create_task(_loop(sync, memo, interval), name="run sync")


async def stop(memo: kopf.Memo) -> None:
    """On cleanup, before the pool closes: let the tick in flight finish, then stop."""
    sync = getattr(memo, "run_sync", None)
    if isinstance(sync, RunSync) and sync.task is not None:
        sync.stopping.set()
        await sync.task


def sync_of(memo: Any) -> RunSync:
    sync = getattr(memo, "run_sync", None)
    if not isinstance(sync, RunSync):
        raise kopf.PermanentError("run sync missing: the startup handler did not run")
    return sync


async def _loop(sync: RunSync, memo: kopf.Memo, interval: float) -> None:
    while True:
        try:
            await asyncio.wait_for(sync.stopping.wait(), interval)
            return
        except TimeoutError:
            pass
        targets = sync.targets()
        if not targets:
            continue
        try:
            patched = await asyncio.to_thread(sync_once, runtime_of(memo), targets, sync.announced)
        except Exception as exc:  # database or API down: said, and tried again next tick
            log.warning(f"run sync: {len(targets)} WorkflowRuns not mirrored: {exc!r}")
            continue
        if patched:
            log.debug(f"run sync: {len(targets)} WorkflowRuns read, {patched} patched")


def sync_once(
    runtime: Runtime, targets: list[Target], announced: dict[str, str] | None = None
) -> int:
    """One tick: one read for all ``targets``, a patch per changed status; how many patched.
    ``announced``: the phases already told by an Event, kept for the WorkflowRuns still
    targets (a stale snapshot repeats a patch, not its Event)."""
    announced = {} if announced is None else announced
    for uid in announced.keys() - {t.uid for t in targets}:
        del announced[uid]
    with runtime.pool.connection() as conn:
        rows = pg_runs.status_many(conn, sorted({t.run_id for t in targets}))
    metrics.RUN_SYNC_READS.inc()
    found = {row.id: row for row in rows}  # a run deleted by hand has none: nothing to mirror
    changes = [
        (target, change)
        for target in targets
        if (row := found.get(target.run_id))
        and (change := changed_status(target.status, mirrored_status(row)))
    ]
    if not changes:
        return 0
    api, core = CustomObjectsApi(runtime.kube), CoreV1Api(runtime.kube)
    with ThreadPoolExecutor(
        min(PATCH_CONCURRENCY, len(changes)), thread_name_prefix="run-sync"
    ) as pool:
        return sum(pool.map(lambda change: _patch(api, core, announced, *change), changes))


def _patch(
    api: CustomObjectsApi,
    core: CoreV1Api,
    announced: dict[str, str],
    target: Target,
    change: dict[str, Any],
) -> int:
    """Patch one status; a new phase is also an Event on the WorkflowRun."""
    try:
        api.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            target.namespace,
            PLURAL,
            target.name,
            {"status": change},
            _content_type=MERGE_PATCH,
        )
    except ApiException as exc:
        if exc.status != 404:  # 404: deleted meanwhile
            log.warning(
                f"run sync: status of {target.namespace}/{target.name} not patched: "
                f"{exc.status} {exc.reason}"
            )
        return 0
    metrics.RUN_SYNC_PATCHES.inc()
    phase = change.get("phase")
    if phase and announced.get(target.uid) != phase:
        announced[target.uid] = phase
        if event := phase_event(phase, target.status | change):
            events.post(core, target.ref(), *event)
    return 1
