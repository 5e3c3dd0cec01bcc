"""`rara runs start|list|show|cancel|wait|signal`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.table import Table
from rich.text import Text

from rara import waits
from rara.cache import describe_reuse
from rara.cli.common import (
    AllNamespacesOption,
    NamespaceOption,
    attempts,
    console,
    literal,
    namespace_client,
    parse_json_arg,
    parse_json_object_arg,
    print_listing,
    reports_errors,
    stamp,
)
from rara.client import Client, RunView
from rara.errors import CapabilityUnavailable
from rara.namespaces import qualified
from rara.pg.runs import ResumedRun
from rara.runs import MAX_INPUT_BYTES
from rara.states import RunStatus

app = typer.Typer(help="Runs of workflow definitions.", no_args_is_help=True)
_T = TypeVar("_T")

# `runs watch` stopped where only a person can move the run on: not a success (a script that
# goes on after `watch` must not go on past a gate), not a failure either.
WAITS_FOR_PERSON = 3
WORKER_POLL_SECONDS = 0.2  # --wait-for-workers: how often to ask again (a CLI, not a hot path)

QueueAnywayOption = Annotated[
    bool, typer.Option(help="start even if no live worker serves a capability")
]
WaitForWorkersOption = Annotated[
    float,
    typer.Option(
        help="seconds to wait for a live worker to serve every capability (workers started "
        "just before, as in a script)",
        min=0,
    ),
]


def _when_served(create: Callable[[], _T], wait_for_workers: float) -> _T:
    """``create()``, asked again while it is refused for a capability no live worker serves,
    for up to ``wait_for_workers`` seconds: nothing is inserted by a refusal, and a worker
    registers its capabilities as it starts."""
    deadline = time.monotonic() + wait_for_workers
    while True:
        try:
            return create()
        except CapabilityUnavailable:
            if time.monotonic() >= deadline:
                raise
            time.sleep(WORKER_POLL_SECONDS)


@app.command()
@reports_errors
def start(
    definition: str,
    version: Annotated[
        int | None, typer.Option(help="definition version (default: latest)")
    ] = None,
    input: Annotated[str | None, typer.Option("--input", help="JSON object, or @file")] = None,
    idempotency_key: Annotated[str | None, typer.Option(help="same key → same run")] = None,
    queue_anyway: QueueAnywayOption = False,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="print only the run id (run=$(rara runs start … -q))"),
    ] = False,
    wait_for_workers: WaitForWorkersOption = 0,
    namespace: NamespaceOption = None,
) -> None:
    """Start a run of the namespace's DEFINITION (refused when no live worker serves one of
    its capabilities)."""
    client = namespace_client(namespace)
    # The file cap only stops a huge file being read whole; the input limit itself is checked
    # on the compact JSON by start_run.
    run_input = parse_json_object_arg(input, "--input", max_bytes=4 * MAX_INPUT_BYTES)
    started = _when_served(
        lambda: client.start_run(
            definition,
            version=version,
            input=run_input,
            idempotency_key=idempotency_key,
            queue_anyway=queue_anyway,
        ),
        wait_for_workers,
    )
    if quiet:
        console.print(started.run_id)
        return
    console.print(
        f"run {started.run_id} " + ("started" if started.created else "(existing run for this key)")
    )


@app.command("list")
@reports_errors
def list_(
    status: Annotated[
        str | None,
        typer.Option(
            help=f"only runs in this phase: {', '.join(waits.RUN_PHASES)} (waiting: no step"
            " ready or running, and a gate, signal or timer open; paused: `rara runs pause`)",
        ),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="newest runs shown at most")] = 50,
    namespace: NamespaceOption = None,
    all_namespaces: AllNamespacesOption = False,
) -> None:
    """The namespace's recent runs; a run only a gate, signal or timer can move on is
    "waiting", with what it waits for."""
    rows = namespace_client(namespace).list_runs(status, limit, all_namespaces=all_namespaces)
    print_listing(
        ("run", "definition", "status", "steps", "created", "finished"),
        (
            (
                r["namespace"],
                (
                    str(r["id"]),
                    f"{r['definition']}@{r['version']}",
                    waits.run_phase_text(r["phase"] or str(r["status"]), r["waiting_for"]),
                    f"{r['done']}/{r['total']}",
                    stamp(r["created_at"]),
                    stamp(r["finished_at"]),
                ),
            )
            for r in rows
        ),
        all_namespaces=all_namespaces,
    )


def print_run(view: RunView) -> None:
    definition = qualified(view.namespace, view.definition)
    console.print(
        Text.assemble(
            literal(f"run {view.id}  {definition}@{view.version}  "),
            literal(view.phase_text, "bold"),
        )
    )
    if view.error:
        console.print(literal(f"error: {view.error}"))
    table = Table(
        "step", "capability", "executor", "status", "attempt", "started", "took", "reused from"
    )
    for s in view.steps:
        took = ""
        if s["started_at"] and s["finished_at"]:
            took = f"{(s['finished_at'] - s['started_at']).total_seconds():.2f}s"
        table.add_row(
            s["key"],
            s["capability"],
            s["executor"],
            waits.shown_status(s["status"], s.get("wait_kind")),
            s.get("children") or attempts(s["capability"], s["attempt"], s["max_attempts"]),
            stamp(s["started_at"]),
            took,
            describe_reuse(s.get("reused_from")),
        )
    console.print(table)
    for s in view.steps:
        waiting = waits.waiting_for(s.get("wait_kind"), s.get("wait_signal"), s.get("wait_due_at"))
        if waiting:
            console.print(f"{s['key']} {waiting}", highlight=False)
    for s in view.steps:
        if s["status"] == "failed" and s["error"]:
            console.print(failed_step(s), highlight=False)


def failed_step(step: dict[str, Any]) -> str:
    """Why a step failed, as its last attempt reported it: the error's type and message (its
    traceback is on the dashboard's run page; every attempt's error: `--attempts`)."""
    error = step["error"]
    if not isinstance(error, dict):
        return f"{step['key']} failed: {error}"
    what = ": ".join(str(part) for part in (error.get("type"), error.get("message")) if part)
    tried = attempts(step["capability"], step["attempt"], step["max_attempts"])
    return f"{step['key']} failed" + (f" (attempt {tried})" if tried else "") + f": {what}"


@app.command()
@reports_errors
def show(
    run_id: int,
    events: Annotated[bool, typer.Option("--events", help="also every progress event")] = False,
    attempts: Annotated[bool, typer.Option("--attempts", help="also every attempt")] = False,
    artifacts: Annotated[
        bool, typer.Option("--artifacts", help="also every artifact, with its full digest")
    ] = False,
) -> None:
    """A run and each of its steps: status, attempts, timings."""
    client = Client()
    print_run(client.get_run(run_id))
    if artifacts:
        print_artifacts(client.run_artifacts(run_id))
    if attempts:
        table = Table("step", "attempt", "worker", "outcome", "started", "ended", "error")
        for a in client.run_attempts(run_id):
            table.add_row(
                a["key"],
                str(a["attempt"]),
                a["worker"],
                a["outcome"],
                stamp(a["started_at"]),
                stamp(a["ended_at"]),
                str((a["error"] or {}).get("message", ""))[:60],
            )
        console.print(table)
    if events:
        print_events(client.run_events(run_id))


# A digest is 71 characters: with step, name, size and type a table needs this much room.
ARTIFACT_TABLE_WIDTH = 140


def print_artifacts(artifacts: list[dict[str, Any]]) -> None:
    """Each artifact with its whole digest: what `rara artifacts get` and scripts take."""
    if console.is_terminal and console.width >= ARTIFACT_TABLE_WIDTH:
        table = Table("step", "artifact", "digest", "size", "media type")
        for art in artifacts:
            table.add_row(
                art["key"], art["name"], art["digest"], str(art["size"]), art["media_type"]
            )
        console.print(table)
        return
    for art in artifacts:
        if console.is_terminal:  # narrow: the digest on a line of its own, never wrapped
            console.print(
                f"{art['key']}/{art['name']} {art['size']}B {art['media_type']}\n  {art['digest']}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
        else:  # a pipe: one line per artifact, for grep and awk
            console.print(
                f"{art['key']}/{art['name']} {art['digest']} {art['size']}B {art['media_type']}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )


# Eight columns need this much room; narrower (or in a pipe) each event is one plain line.
EVENT_TABLE_WIDTH = 120
METRICS_PER_LINE = 6  # an event's metrics on its line up to this many; more: this many a line


def print_events(events: list[dict[str, Any]]) -> None:
    rows = []
    for e in events:
        rows.append(
            (
                stamp(e["created_at"]),
                f"{e['key']}#{e['attempt']}",
                str(e["seq"]),
                e["kind"],
                "" if e["fraction"] is None else f"{e['fraction']:.2f}",
                e["message"] or "",
                [f"{k}={v:.4g}" for k, v in (e["metrics"] or {}).items()],
            )
        )
    if console.is_terminal and console.width >= EVENT_TABLE_WIDTH:
        table = Table("time", "step#attempt", "seq", "kind", "fraction", "message", "metrics")
        for *cells, metrics in rows:
            table.add_row(*cells, ", ".join(metrics))
        console.print(table)
        return
    for time_, step, seq, kind, fraction, message, metrics in rows:
        line = " ".join(part for part in (time_, step, f"seq={seq}", kind, fraction) if part)
        # A step that reports many metrics at once (60 single values at its end): a few a line.
        inline = ", ".join(metrics) if len(metrics) <= METRICS_PER_LINE else ""
        tail = " · ".join(part for part in (message, inline) if part)
        console.print(f"{line}  {tail}" if tail else line, highlight=False, markup=False)
        if not inline:
            for i in range(0, len(metrics), METRICS_PER_LINE):
                chunk = ", ".join(metrics[i : i + METRICS_PER_LINE])
                console.print(f"    {chunk}", highlight=False, markup=False)


@app.command()
@reports_errors
def watch(
    run_id: int,
    timeout: Annotated[float | None, typer.Option(help="seconds")] = None,
    through_waits: Annotated[
        bool,
        typer.Option(
            "--through-waits",
            help="keep watching while the run waits for a signal or an approval, to its end",
        ),
    ] = False,
) -> None:
    """Live per-step progress until the run ends, then a summary. Exit 0: it succeeded; 1: it
    failed or was cancelled; 3: it stopped where only a person can move it on (a signal or an
    approval it waits for, said with the command that gives it; --through-waits: go on)."""
    from rara.cli.watch import summary
    from rara.cli.watch import watch as watch_run

    client = Client()
    client.get_run(run_id)  # a clear error for an unknown run before the live view starts
    status = watch_run(client.url, run_id, console, timeout, through_waits=through_waits)
    console.print(summary(client.url, run_id))
    if not status.terminal:
        console.print(f"run {run_id} waits for a person:", highlight=False)
        for line in waits.next_moves(run_id, client.awaiting_person(run_id)):
            console.print(f"  {line}", highlight=False, markup=False)
        raise typer.Exit(WAITS_FOR_PERSON)
    if status is not RunStatus.SUCCEEDED:
        raise typer.Exit(1)


@app.command()
@reports_errors
def retry(
    run_id: int,
    from_failure: Annotated[
        bool,
        typer.Option(
            "--from-failure",
            help="reuse every step that succeeded in RUN_ID; run the failed, cancelled and "
            "never-run ones",
        ),
    ] = False,
    from_step: Annotated[
        str | None,
        typer.Option(
            "--from-step",
            metavar="STEP",
            help="re-run from STEP: run it and every step downstream of it again, reuse every "
            "other step that succeeded in RUN_ID (any finished run)",
        ),
    ] = None,
    idempotency_key: Annotated[str | None, typer.Option(help="same key → same run")] = None,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet", "-q", help="print only the new run's id (run=$(rara runs retry … -q))"
        ),
    ] = False,
    queue_anyway: QueueAnywayOption = False,
    wait_for_workers: WaitForWorkersOption = 0,
) -> None:
    """Run RUN_ID's version with its input again, as a new run (refused, as `runs start` is,
    when no live worker serves a capability it would run)."""
    client = Client()
    if from_failure or from_step is not None:

        def resume() -> ResumedRun:
            missing = [] if queue_anyway else client.unserved_capabilities(run_id, from_step)
            if missing:
                raise CapabilityUnavailable(missing)
            return client.resume_run(run_id, idempotency_key=idempotency_key, rerun_from=from_step)

        resumed = _when_served(resume, wait_for_workers)
        if quiet:
            console.print(resumed.run_id)
            return
        again = f" from step {from_step}" if from_step is not None else ""
        console.print(
            f"run {resumed.run_id}: resumes run {run_id}{again}, {resumed.reused} steps reused",
            highlight=False,
        )
        return
    old = client.get_run(run_id)
    # Again in RUN_ID's namespace, of its definition there, whatever RARA_NAMESPACE says.
    there = Client(client.url, namespace=old.namespace)
    started = _when_served(
        lambda: there.start_run(
            old.definition,
            version=old.version,
            input=old.input,
            idempotency_key=idempotency_key,
            queue_anyway=queue_anyway,
        ),
        wait_for_workers,
    )
    if quiet:
        console.print(started.run_id)
        return
    console.print(
        f"run {started.run_id}: {qualified(old.namespace, old.definition)}@{old.version} again",
        highlight=False,
    )


@app.command()
@reports_errors
def cancel(
    run_id: int,
    reason: Annotated[
        str | None,
        typer.Option(help="why: kept with who cancelled, as the run's error (rara runs show)"),
    ] = None,
) -> None:
    """Cancel a run: waiting steps at once, running ones through their worker."""
    if Client().cancel_run(run_id, reason):
        console.print(f"run {run_id}: cancel requested")
    else:
        console.print(f"run {run_id} had already ended")


@app.command()
@reports_errors
def wait(
    run_id: int, timeout: Annotated[float | None, typer.Option(help="seconds")] = None
) -> None:
    """Wait until the run ends; exit code 1 unless it succeeded."""
    view = Client().wait(run_id, timeout)
    print_run(view)
    if view.status is not RunStatus.SUCCEEDED:
        raise typer.Exit(1)


@app.command()
@reports_errors
def signal(
    run_id: int,
    name: str,
    payload: Annotated[
        str | None, typer.Option(help="JSON, inline or @file: the waiting step's result")
    ] = None,
    key: Annotated[
        str | None,
        typer.Option(help="accepted once per run (default: the signal's name)"),
    ] = None,
) -> None:
    """Signal NAME to a run: the step waiting for it (wait: {signal: NAME}) ends, and what
    depends on it becomes ready. The same --key again changes nothing."""
    value = parse_json_arg(payload, "--payload", waits.MAX_PAYLOAD_BYTES)
    sent = Client().signal_run(run_id, name, value, key)
    if sent.accepted:
        console.print(f"run {run_id}: signal {name} ended step {sent.step_key}", highlight=False)
    else:
        console.print(
            f"run {run_id}: signal {name} (key {key or name}) was taken at "
            f"{stamp(sent.sent_at)}; nothing changed",
            highlight=False,
        )
