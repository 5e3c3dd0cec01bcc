"""A run's page's links to other runs: the releases it became ("promoted as NAME@N",
rara.ui.releases), the run it resumes ("resumes run N", "from step S" for a re-run from a
step) and the runs that resumed it ("resumed by run M"), read from the resumed run's
``rara_runs.resumes`` (db/functions/runs.sql, ``rara_run_resume``) under the viewer's
namespace policies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg.rows import class_row

from rara.pg.queries import AsyncConn, amany, aone
from rara.ui.releases import releases_of_run

# The forward links a page lists; a run resumed more often than this is a loop, not a page.
RESUMED_BY_SHOWN = 50


@dataclass(frozen=True, slots=True)
class Resumes:
    resumes: int | None  # the run this one resumes (None: started, not resumed)
    rerun_from: str | None  # the step it re-ran from (None: a resume from failure)
    resumes_kept: bool  # that run is still there: link to it


@dataclass(frozen=True, slots=True)
class ResumedBy:
    id: int
    status: str
    rerun_from: str | None


async def run_links(conn: AsyncConn, run_id: int) -> dict[str, Any]:
    """The run page's ``promoted``, ``resumes`` and ``resumed_by``."""
    return {
        "promoted": await releases_of_run(conn, run_id),
        "resumes": await aone(conn, "ui_run_resumes_get", class_row(Resumes), run_id=run_id),
        "resumed_by": await amany(
            conn,
            "ui_run_resumed_by_list",
            class_row(ResumedBy),
            run_id=run_id,
            limit=RESUMED_BY_SHOWN,
        ),
    }
