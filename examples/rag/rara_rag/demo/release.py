"""The end of the demo's refresh: its gate, a decision, and a release (docs/releases.md).

The pipeline (examples/rag-refresh.yaml) ends in the approval gate ``release``, which freezes
the quality table and the digests of what the run made. The demo shows that evidence as
`rara approvals show` does, then decides as its client login and says so — in production a
person decides, on the dashboard or with `rara approvals approve` — and promotes the index and
the adapter as the release ``rag-refresh``, reading it back by name as a serving process
would (`rara releases get rag-refresh`). A refresh whose bytes are those the current release
already serves promotes nothing: a release is a change of what is served.
"""

from __future__ import annotations

from rich.console import Console

from rara.cli.approvals import print_approval
from rara.client import Client
from rara.errors import NotFound
from rara.releases import Release
from rara.waits import next_moves

GATE = "release"  # the gate's step key in examples/rag-refresh.yaml
NAME = "rag-refresh"  # the release: what the online retrieval path serves
SERVED = ("index/index.bm25", "adapt/adapter.tar.gz")  # STEP/NAME of what it serves
DEMO_REASON = "approved by make demo as its client login; in production a person decides"


def decide(
    client: Client, run_id: int, console: Console, *, approve: bool, evidence: bool = True
) -> bool:
    """Show what the gate of run ``run_id`` shows (``evidence``; else a line that says where
    to read it); approve it when ``approve`` (True: it is approved now), else say how a person
    moves it on and leave it waiting."""
    if evidence:
        console.rule(f"run {run_id} waits at its gate")
        print_approval(client.get_approval(run_id, GATE), console)
    else:
        console.print(
            f"run {run_id} waits at its gate (its evidence: rara approvals show {run_id} {GATE})",
            markup=False,
            highlight=False,
        )
    if not approve:
        for line in next_moves(run_id, client.awaiting_person(run_id)):
            console.print(line, markup=False, highlight=False)
        return False
    decided = client.decide_approval(run_id, GATE, approve=True, reason=DEMO_REASON)
    console.print(
        f"{GATE} {decided.decision} by {decided.decided_by}: {DEMO_REASON}",
        markup=False,
        highlight=False,
    )
    return True


def served_digests(client: Client, run_id: int) -> dict[str, str]:
    """STEP/NAME → digest of what a release of run ``run_id`` serves."""
    made = {f"{a['key']}/{a['name']}": a["digest"] for a in client.run_artifacts(run_id)}
    return {ref: made[ref] for ref in SERVED}


def promote(client: Client, run_id: int, console: Console) -> Release | None:
    """Release what run ``run_id`` made, unless the current release serves the same bytes;
    then read the release back by name and check it names exactly those bytes."""
    wanted = served_digests(client, run_id)
    try:
        current: Release | None = client.get_release(NAME)
    except NotFound:
        current = None
    if current is not None and _digests(current) == wanted:
        console.print(
            f"release {NAME}@{current.number} already serves these bytes: nothing to promote",
            highlight=False,
        )
        return None
    released = client.promote_release(
        NAME,
        run_id,
        artifacts=list(SERVED),
        results=["evaluate", "adapt"],
        note=f"the demo's refresh, run {run_id}",
    )
    read = client.get_release(NAME)  # as `rara releases get rag-refresh` resolves it
    if read.number != released.number or _digests(read) != wanted:
        raise RuntimeError(f"release {NAME} reads back as {read.number}, not what was promoted")
    console.print(
        f"release [bold]{NAME}@{read.number}[/bold] promoted by {read.promoted_by} from run "
        f"{run_id}; `rara releases get {NAME}` resolves it to:",
        highlight=False,
    )
    for artifact in read.artifacts:
        console.print(
            f"  {artifact.step_key}/{artifact.name} {artifact.digest} {artifact.size}B",
            markup=False,
            highlight=False,
        )
    return read


def _digests(release: Release) -> dict[str, str]:
    return {f"{a.step_key}/{a.name}": a.digest for a in release.artifacts}
