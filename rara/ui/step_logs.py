"""The run page's Logs: what each attempt of each step wrote (docs/ui.md, "Step logs").

Read when the section is opened (``/runs/<id>/logs``, a page of its own too), from the same
statement as ``rara runs logs`` (step_log_list), the text escaped by the template like every
value. While the run runs, the live view's state carries a mark per run (``logs``: read by
``rara.ui.live`` with the rest of the run's state, once for every viewer; step_log_marks); the
page reads the section again when the mark moves or a step changes status (static/run.js).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from rara.pg.step_logs import LogChunk, alist_chunks
from rara.ui import data
from rara.ui.render import page
from rara.ui.user_roles import connection

# At most this many chunks (≤ 64 KiB each) on the page; more: `rara runs logs` prints them all.
SHOWN_CHUNKS = 128


@dataclass
class AttemptLog:
    key: str
    attempt: int
    text: list[str] = field(default_factory=list)
    dropped: int = 0


def by_attempt(chunks: list[LogChunk]) -> list[AttemptLog]:
    """The chunks as one text per (step, attempt), in the order each first wrote."""
    logs: dict[tuple[str, int], AttemptLog] = {}
    for c in chunks:
        log = logs.setdefault((c.key, c.attempt), AttemptLog(c.key, c.attempt))
        log.text.append(c.body)
        log.dropped += c.dropped
    return list(logs.values())


async def run_logs(request: Request) -> Response:
    run_id = int(request.path_params["run_id"])
    async with connection(request) as conn:
        run = await data.run_get(conn, run_id)  # as the viewer sees it: none of another team's
        if run is None:
            raise HTTPException(404, f"no run {run_id}")
        chunks = await alist_chunks(conn, run_id, limit=SHOWN_CHUNKS + 1)
    return page(
        request,
        "run_logs.html",
        run=run,
        logs=by_attempt(chunks[:SHOWN_CHUNKS]),
        more=len(chunks) > SHOWN_CHUNKS,
    )
