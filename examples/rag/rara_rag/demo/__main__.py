"""``make demo``: the RAG refresh pipeline, for real, on the embedded PostgreSQL.

Applies ``examples/rag-refresh.yaml``, starts an executor (index-shard, a map with a child per
shard of passages; index, evaluate, adapt) and a worker (collect, clean + the gRPC adapter),
starts a run, shows live progress until the run stops at its approval gate, shows the gate's
evidence (the quality table, the digests), approves it as the demo's client login (a person's
decision in production; ``--no-approve`` leaves it to you), promotes the index and the
adapter as the release ``rag-refresh`` and reads it back by name, then a summary with
recall@k and MRR before and after adaptation. ``--chaos`` SIGKILLs and restarts the worker
and the executor at random while the run goes on; the run must still succeed, with the
deterministic steps' artifacts (the shards' included) identical to a clean computation and
adaptation resumed from its last checkpoint.
Artifacts (checkpoints included) go where ``RARA_ARTIFACTS`` says, a directory or
``s3://bucket/prefix?endpoint=…`` with the credentials in the environment, else to
``.rara/artifacts``. Exit status: 0 when the run succeeded (and, with --chaos, the checks held)
or, with --no-approve, waits at its gate; 2 when the artifact store cannot be used.
"""

from __future__ import annotations

import argparse
import json
import secrets
import socket
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

from rara.artifacts.location import ENV_VAR
from rara.cli.common import WideWhenPiped
from rara.cli.watch import summary, watch
from rara.client import Client
from rara.pg import access
from rara.pg.connect import database_url
from rara.pg.logins import ensure_login
from rara.pg.migrate import migrate
from rara.states import RunStatus
from rara_rag.demo import refresh, release, store
from rara_rag.demo.chaos import ChaosMonkey, deterministic_digests
from rara_rag.demo.processes import Child

# examples/rag/rara_rag/demo/__main__.py -> examples/rag-refresh.yaml: the demo runs from the
# repository's editable install (`make demo`), beside the document the README applies by hand.
DEFINITION = Path(__file__).resolve().parents[3] / "rag-refresh.yaml"
CAPABILITIES = {
    "corpus.collect@1",
    "corpus.clean@1",
    "index.shard@1",
    "index.build@1",
    "eval.retrieval@1",
    "adapt.lora@1",
}


def clean_shards() -> int:
    """How many shards the definition's clean step cuts the passages into."""
    import yaml

    steps = yaml.safe_load(DEFINITION.read_text())["spec"]["steps"]
    return int(next(s for s in steps if s["key"] == "clean")["input"].get("shards", 1))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def logins(url: str, console: Console) -> tuple[str, str]:
    """The worker's and the client's database URLs: a login each, in rara_worker and
    rara_client (docs/least-privilege.md), so the pipeline runs with what each process may do
    and no more — where the owner may create roles and the server trusts local logins (the
    demo's own server does). Elsewhere the given URL for both, said so: logins with passwords
    are their owner's to make (docs/security.md, "Database roles")."""
    try:
        worker = ensure_login(url, "rara_worker", "rara_demo_worker")
        client = ensure_login(url, "rara_client", "rara_demo_client")
        psycopg.connect(worker).close()
        with psycopg.connect(url, autocommit=True) as owner:
            # A new database isolates its namespaces (docs/namespaces.md): the client's is
            # `default` (the worker's role has every one).
            access.grant(owner, "rara_demo_client", ["default"])
    except (psycopg.errors.InsufficientPrivilege, psycopg.OperationalError) as exc:
        reason = str(exc).strip().splitlines()[0]
        console.print(
            f"the worker and the client use the given database URL ({reason})", markup=False
        )
        return url, url
    console.print(
        "database logins: worker rara_demo_worker (rara_worker), "
        "client rara_demo_client (rara_client)"
    )
    return worker, client


def services(home: Path, url: str, artifacts: str, lease_seconds: float) -> tuple[Child, Child]:
    """The executor and the worker, both on the artifact store ``artifacts`` (a directory or
    ``s3://…``, given as ``RARA_ARTIFACTS``; S3 credentials, if any, come with the environment
    the children inherit)."""
    token = home / "executor.token"
    if not token.exists():
        token.write_text(secrets.token_urlsafe(32))
        token.chmod(0o600)
    endpoint = f"127.0.0.1:{_free_port()}"  # fixed across restarts: the worker reconnects
    executor = Child(
        "executor",
        [
            "-m",
            "rara.executor.main",
            "--listen",
            endpoint,
            "--token-file",
            str(token),
            "--plugins",
            "rara_rag.demo.plugins",
            "--grace",
            "5",
        ],
        home / "executor.log",
        env={ENV_VAR: artifacts},
    )
    worker = Child(
        "worker",
        [
            "-m",
            "rara.worker",
            "--handlers",
            "rara_rag.demo.handlers",
            "--executor-endpoint",
            endpoint,
            "--executor-token-file",
            str(token),
            "--lease-seconds",
            str(lease_seconds),
            "--shutdown-grace-seconds",
            "5",
        ],
        home / "worker.log",
        env={"DATABASE_URL": url, ENV_VAR: artifacts},
    )
    return executor, worker


def wait_until_served(client: Client, deadline: float) -> None:
    from rara.pg import workers

    while time.monotonic() < deadline:
        with psycopg.connect(client.url, autocommit=True) as conn:
            served = workers.capabilities(conn, alive_seconds=30)
        if served >= CAPABILITIES:
            return
        time.sleep(0.2)
    raise TimeoutError(f"worker did not come up serving {sorted(CAPABILITIES)} in time")


COLUMNS = ("recall@1", "recall@5", "recall@10", "mrr@10")
ROWS = (
    ("before", "MiniLM before LoRA"),
    ("after", "MiniLM after LoRA"),
    ("hybrid", "hybrid: BM25 + after (RRF)"),
    ("diff", "after − before (paired)"),
)


def quality(client: Client, run_id: int) -> dict[str, dict[str, float]]:
    """Each retriever's metrics (``m``, ``m_lo``, ``m_hi``) from the evaluate and adapt steps."""
    steps = {s["key"]: s for s in client.get_run(run_id).steps}
    out: dict[str, dict[str, float]] = {}
    bm25 = (steps.get("evaluate", {}).get("result") or {}).get("bm25", {})
    if bm25:
        out["bm25"] = bm25
    adapt_metrics = (steps.get("adapt", {}).get("result") or {}).get("metrics", {})
    for prefix, _ in ROWS:
        row = {
            k.split("/", 1)[1]: v for k, v in adapt_metrics.items() if k.startswith(prefix + "/")
        }
        if row:
            out[prefix] = row
    return out


def metrics_table(client: Client, run_id: int) -> Table:
    rows = quality(client, run_id)
    queries = rows.get("bm25", {}).get("queries")
    title = "retrieval quality, mean [95% bootstrap interval]"
    if queries:
        title += f" over {int(queries)} held-out test queries"
    table = Table("retriever", "recall@1", "recall@5", "recall@10", "MRR@10", title=title)
    table.caption = "LoRA settings chosen on other, validation queries: python -m rara_rag.tune"
    for key, label in (("bm25", "BM25 index"), *ROWS):
        if key in rows:
            signed = key == "diff"
            table.add_row(label, *(_fmt(rows[key], k, signed) for k in COLUMNS))
    return table


def verdict(client: Client, run_id: int) -> str:
    """One line on whether adaptation helped MRR@10, judged by the paired interval."""
    diff = quality(client, run_id).get("diff", {})
    if not {"mrr@10", "mrr@10_lo", "mrr@10_hi"} <= diff.keys():
        return "LoRA: no before/after comparison (adaptation did not report one)"
    d, lo, hi = diff["mrr@10"], diff["mrr@10_lo"], diff["mrr@10_hi"]
    if lo > 0:
        what = "a gain: the whole interval is above zero"
    elif hi < 0:
        what = "a loss: the whole interval is below zero"
    else:
        what = "within noise: the interval contains zero"
    return f"LoRA changed MRR@10 by {d:+.3f} (95% CI {lo:+.3f} to {hi:+.3f}), {what}"


def _fmt(values: dict[str, Any], key: str, signed: bool = False) -> str:
    value = values.get(key)
    if not isinstance(value, float | int):
        return "-"
    spec = "+.3f" if signed else ".3f"
    lo, hi = values.get(f"{key}_lo"), values.get(f"{key}_hi")
    if isinstance(lo, float | int) and isinstance(hi, float | int):
        return f"{value:{spec}} [{lo:{spec}}, {hi:{spec}}]"
    return f"{value:{spec}}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rara_rag.demo", description=__doc__)
    parser.add_argument("--chaos", action="store_true", help="SIGKILL/restart services at random")
    parser.add_argument(
        "--corpus", choices=("stdlib", "pydoc", "python"), default=None, help="built-in corpus"
    )
    parser.add_argument("--limit", type=int, default=None, help="first N corpus documents only")
    parser.add_argument("--train", type=int, default=None, help="training pairs for LoRA")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for the run")
    parser.add_argument("--seed", type=int, default=None, help="chaos seed (printed)")
    parser.add_argument(
        "--no-refresh", action="store_true", help="stop after the first run (no refreshes)"
    )
    parser.add_argument(
        "--no-approve",
        action="store_true",
        help="leave the first run waiting at its gate for your decision (no refreshes)",
    )
    parser.add_argument(
        "--report", type=Path, default=None, help="write each run's figures here (JSON)"
    )
    args = parser.parse_args(argv)
    # Tables whole in a pipe or a log file too (`make demo | tee demo.log`, CI): rich's 80
    # columns there cut their cells.
    console = WideWhenPiped()
    started = time.monotonic()

    home = Path(".rara/demo").resolve()
    home.mkdir(parents=True, exist_ok=True)
    artifacts = store.location()
    if problem := store.check(artifacts):
        console.print(problem, style="red", markup=False)
        return 2
    console.print(f"artifacts in {store.describe(artifacts)}")
    url = database_url()
    migrate(url)
    worker_url, client_url = logins(url, console)
    client = Client(client_url)
    applied = client.apply_definition(DEFINITION.read_text())
    console.print(
        f"definition [bold]{applied.name}[/bold] version {applied.version} "
        f"{applied.digest[:19]}… ({'created' if applied.created else 'unchanged'})"
    )

    executor, worker = services(
        home, worker_url, artifacts, lease_seconds=4.0 if args.chaos else 15.0
    )
    # The corpus as a refresh pipeline keeps it: a file the pipeline re-reads every run.
    documents = refresh.write_corpus(home / "corpus" / "documents.jsonl", args.corpus or "stdlib")
    run_input: dict[str, Any] = {
        k: v
        for k, v in {
            "paths": [str(documents)],
            "limit": args.limit,
            "train": args.train,
            "epochs": args.epochs,
        }.items()
        if v is not None
    }
    monkey = None
    refreshes: list[refresh.Measured] = []
    try:
        executor.start()
        worker.start()
        wait_until_served(client, time.monotonic() + 60)
        cpu_before = refresh.cpu_seconds([worker, executor])
        begun = time.monotonic()
        run = client.start_run(applied.name, input=run_input)
        console.print(f"run [bold]{run.run_id}[/bold] started; logs in {home}")
        if args.chaos:
            monkey = ChaosMonkey(
                [worker, executor], url=url, run_id=run.run_id, seed=args.seed, console=console
            )
            monkey.start()
        status = _through_the_gate(client, url, run.run_id, console, args)
        first = refresh.Measured(
            run.run_id,
            "first run",
            time.monotonic() - begun,
            refresh.cpu_seconds([worker, executor]) - cpu_before,
            refresh.reuse_of(url, run.run_id),
        )
        if status is RunStatus.SUCCEEDED:
            release.promote(client, run.run_id, console)
        if status is RunStatus.SUCCEEDED and not args.chaos and not args.no_refresh:
            refreshes = _refreshes(
                client, url, applied.name, run_input, [worker, executor], console, args
            )
    finally:
        if monkey is not None:
            monkey.stop()
        worker.terminate()
        executor.terminate()

    console.print(summary(url, run.run_id))
    console.print(metrics_table(client, run.run_id))
    console.print(verdict(client, run.run_id))
    console.print(
        f"artifacts: {store.describe(artifacts)}  (rara artifacts get DIGEST -o FILE"
        f"{', with RARA_ARTIFACTS as here' if artifacts.startswith('s3://') else ''})"
    )
    for measured in refreshes:
        console.print(measured.describe(first), markup=False, highlight=False, soft_wrap=True)
    if args.report is not None:
        args.report.write_text(json.dumps([m.as_json() for m in (first, *refreshes)], indent=1))
    ok = status is RunStatus.SUCCEEDED or (args.no_approve and not status.terminal)
    if args.chaos and monkey is not None:
        console.print(monkey.report())
        ok = ok and _chaos_checks(client, run.run_id, run_input, console)
    took = time.monotonic() - started
    if refreshes:  # a refresh that did not succeed raised RefreshFailed
        ids = [str(m.run_id) for m in refreshes]
        again = " and ".join([", ".join(ids[:-1]), ids[-1]] if len(ids) > 1 else ids)
        console.print(
            f"run {run.run_id} [bold]{status}[/bold], then refresh runs {again} succeeded:"
            f" {took:.1f} s in all"
        )
    else:
        console.print(f"run {run.run_id}: [bold]{status}[/bold] in {took:.1f} s")
    console.print(dashboard(run.run_id), markup=False, highlight=False)
    return 0 if ok else 1


def dashboard(run_id: int) -> str:
    """Where to look at the run next: the dashboard's command and the run's page (rara ui's
    defaults: loopback, port 8080, read-only; docs/ui.md)."""
    return (
        f"the dashboard: `rara ui` (in .venv/bin), then http://127.0.0.1:8080/runs/{run_id}"
        " (read-only: its graph, its steps, the gate's evidence)"
    )


def _refreshes(
    client: Client,
    url: str,
    name: str,
    run_input: dict[str, Any],
    services: list[Child],
    console: Console,
    args: argparse.Namespace,
) -> list[refresh.Measured]:
    """The refresh of the same documents, then of one changed (rara_rag.demo.refresh), each
    watched as the first run was."""
    measured = []
    for label, change in (("documents unchanged", False), ("one document changed", True)):
        if change:
            label += f" ({refresh.change_one_document(Path(run_input['paths'][0]), args.limit)})"
        console.rule(f"refresh, {label}")
        cpu_before = refresh.cpu_seconds(services)
        begun = time.monotonic()
        run = client.start_run(name, input=run_input)
        status = _through_the_gate(client, url, run.run_id, console, args, evidence=False)
        wall, cpu = time.monotonic() - begun, refresh.cpu_seconds(services) - cpu_before
        if status is not RunStatus.SUCCEEDED:
            raise refresh.RefreshFailed(f"refresh run {run.run_id} ({label}) {status}")
        measured.append(
            refresh.Measured(run.run_id, label, wall, cpu, refresh.reuse_of(url, run.run_id))
        )
        release.promote(client, run.run_id, console)
    return measured


def _through_the_gate(
    client: Client, url: str, run_id: int, console: Console, args: argparse.Namespace,
    evidence: bool = True,
) -> RunStatus:  # fmt: skip
    """Watch run ``run_id`` to its gate and decide there (rara_rag.demo.release), showing
    its ``evidence``; the run ends then (the gate is its last step). Its status: terminal, or
    not when it is left waiting (--no-approve)."""
    status = watch(url, run_id, console, timeout=args.timeout)
    approve = not args.no_approve
    if status.terminal or not release.decide(
        client, run_id, console, approve=approve, evidence=evidence
    ):
        return status
    return client.wait(run_id, timeout=args.timeout).status


def _chaos_checks(client: Client, run_id: int, run_input: dict[str, Any], console: Console) -> bool:
    produced = {(a["key"], a["name"]): a["digest"] for a in client.run_artifacts(run_id)}
    expected = deterministic_digests(run_input, shards=clean_shards())
    same = all(produced.get(k) == v for k, v in expected.items())
    console.print(f"deterministic artifacts identical to a clean computation: {same}")
    adapt = next(s for s in client.get_run(run_id).steps if s["key"] == "adapt")
    resumed = (adapt["result"] or {}).get("resumed_from_step", 0)
    console.print(f"adapt: {adapt['attempt']} attempt(s), resumed from step {resumed}")
    return same and resumed > 0


if __name__ == "__main__":
    sys.exit(main())
