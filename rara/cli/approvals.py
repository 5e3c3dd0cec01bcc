"""`rara approvals list|show|approve|reject` (docs/waits.md, "Approvals")."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Column, Table
from rich.text import Text

from rara.cli.common import (
    AllNamespacesOption,
    NamespaceOption,
    console,
    literal,
    namespace_client,
    print_listing,
    reports_errors,
    stamp,
)
from rara.client import Client
from rara.evidence import MetricTable, metric_table
from rara.pg.waits import Approval, ApprovalRow

app = typer.Typer(
    help="Approval gates: what each shows, and a person's decision.", no_args_is_help=True
)

ReasonOption = Annotated[
    str | None, typer.Option("--reason", "-m", help="why: kept with the decision")
]


def _when(value: datetime | None) -> str:
    return stamp(value)


def _state(decision: str | None) -> str:
    return decision or "waiting"


@app.command("list")
@reports_errors
def list_(
    namespace: NamespaceOption = None,
    all_namespaces: AllNamespacesOption = False,
    decided: Annotated[bool, typer.Option("--all", help="decided ones too")] = False,
) -> None:
    """Approvals waiting for a decision (with --all, decided ones too)."""
    rows = namespace_client(namespace).list_approvals(
        open_only=not decided, all_namespaces=all_namespaces
    )
    print_listing(
        ("run", "step", "definition", "state", "requested", "deadline", "decided by"),
        ((a.namespace, _row(a)) for a in rows),
        all_namespaces=all_namespaces,
    )


def _row(a: ApprovalRow) -> tuple[str, ...]:
    return (
        str(a.run_id),
        a.step_key,
        a.definition,
        _state(a.decision),
        _when(a.requested_at),
        _when(a.due_at),
        a.decided_by or "",
    )


def print_approval(a: Approval, out: Console = console) -> None:
    """The approval as `rara approvals show` prints it (the demo prints it so too)."""
    # ``out`` may be any console (the demo passes its own): every value is ``literal``.
    out.print(
        Text.assemble(
            literal(f"run {a.run_id} · {a.namespace}/{a.definition} · approval "),
            literal(a.step_key, "bold"),
            literal(f": {_state(a.decision)}"),
        )
    )
    out.print(
        literal(
            f"requested {_when(a.requested_at)}"
            + (f", deadline {_when(a.due_at)}" if a.due_at else "")
            + f"; approvers: {', '.join(a.approvers) or 'any client of the namespace'}"
            + f"; a rejection {'cancels' if a.on_reject == 'cancel' else 'fails'} the run"
        )
    )
    if a.decision:
        by = a.decided_by or "its deadline"
        if a.decided_login and a.decided_login != a.decided_by:
            by += f" (through login {a.decided_login})"
        out.print(
            literal(
                f"{a.decision} by {by} at {_when(a.decided_at)}"
                + (f": {a.reason}" if a.reason else "")
            )
        )
    shown = a.evidence.get("shown", [])
    if shown:
        out.print(Text.assemble(("Evidence", "bold"), " (as it was when the gate began to wait)"))
        for item in shown:
            table = metric_table(item.get("value"), item["show"])
            if table is not None:
                out.print(evidence_table(item["show"], table))
                continue
            out.print(literal(f"  {item['show']}:"))
            text = json.dumps(item.get("value"), indent=2, sort_keys=True)
            for line in text.splitlines():
                out.print(literal("    " + line))
    artifacts = a.evidence.get("artifacts", [])
    if artifacts:
        digests = Table("step", "artifact", "digest", "size")
        for art in artifacts:
            digests.add_row(
                literal(art["step"]), literal(art["name"]), literal(art["digest"]),
                literal(art["size"]),
            )  # fmt: skip
        out.print(digests)


def evidence_table(shown: str, table: MetricTable) -> Table:
    drawn = Table(
        "",
        *(Column(header=literal(c)) for c in table.columns),
        title=literal(shown),
        title_justify="left",
    )
    for name, cells in table.text_rows():
        drawn.add_row(literal(name), *(literal(c) for c in cells))
    return drawn


@app.command()
@reports_errors
def show(run_id: int, step: str) -> None:
    """An approval: the evidence it shows, who may decide, and the decision if made."""
    print_approval(Client().get_approval(run_id, step))


def _decide(run_id: int, step: str, approve: bool, reason: str | None) -> None:
    decided = Client().decide_approval(run_id, step, approve=approve, reason=reason)
    if decided.recorded:
        console.print(
            f"run {run_id}: {step} {decided.decision} by {decided.decided_by}", highlight=False
        )
    else:
        console.print(
            f"run {run_id}: {step} was already {decided.decision} by {decided.decided_by} at "
            f"{_when(decided.decided_at)}; nothing changed",
            highlight=False,
        )


@app.command()
@reports_errors
def approve(run_id: int, step: str, reason: ReasonOption = None) -> None:
    """Approve: the gate ends and what depends on it runs. You are recorded as the one who
    decided (your database login), with the time and --reason."""
    _decide(run_id, step, True, reason)


@app.command()
@reports_errors
def reject(run_id: int, step: str, reason: ReasonOption = None) -> None:
    """Reject: the run ends as the gate says (onReject: fail, the default, or cancel)."""
    _decide(run_id, step, False, reason)
