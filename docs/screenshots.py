"""The dashboard's pictures in docs/, taken from the demo's real pipeline.

    .venv/bin/python -m docs.screenshots            # runs the demo first (make demo; ~3 min)
    .venv/bin/python -m docs.screenshots --run 1    # a finished demo run already in the database
    .venv/bin/python -m docs.screenshots --limit 100   # the demo's options go to the demo

The database is the demo's: ``DATABASE_URL``, else the embedded PostgreSQL under ``.rara/``
(which ``make demo`` leaves running). A read-only ``rara ui`` is started on it and Debian's
chromium, driven by Playwright as in tests/ui, photographs a 1366 px wide window:

- ``docs/ui-run.png``: the run page, its DAG (the map step as the group "index-shard x4") and
  the steps table with the map's children opened;
- ``docs/ui-metrics.png``: the Metrics section, the adaptation's loss curve first, then its
  single values;
- ``docs/ui-lineage.png``: the lineage of the BM25 index (produced by index, read by evaluate
  and adapt).

A picture of a test definition would show the page, not what a user of the demo sees; hence
the demo's run, whose shape, timings and loss are real.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rara.client import Client
from rara.pg.connect import database_url
from rara.states import RunStatus
from tests.support.ui import CHROMIUM, ROOT, UiServer

DOCS = ROOT / "docs"
WIDTH = 1366  # the window issue 32 measures the pages against
DEFINITION = "rag-refresh"  # examples/rag-refresh.yaml, what the demo applies
INDEX = re.compile(r"^index\.bm25$")  # the index step's artifact


def run_demo(options: list[str]) -> None:
    """The demo, as ``make demo`` runs it: its own worker and executor, on the same database."""
    subprocess.run([sys.executable, "-m", "rara_rag.demo", *options], cwd=ROOT, check=True)


def latest_demo_run(url: str) -> int:
    """The newest succeeded run of the demo's definition (the client's runs list)."""
    for run in Client(url).list_runs(RunStatus.SUCCEEDED, limit=200):
        if run["definition"] == DEFINITION:
            return int(run["id"])
    raise SystemExit(f"no succeeded run of {DEFINITION} in the database: run without --run")


def _between(page: Any, top: Any, bottom: Any) -> dict[str, float]:
    """A full-page clip from one element's top to another's bottom, the window's width."""
    first, last = top.bounding_box(), bottom.bounding_box()
    scroll = page.evaluate("window.scrollY")
    y = first["y"] + scroll - 12
    return {"x": 0, "y": y, "width": WIDTH, "height": last["y"] + scroll + last["height"] + 12 - y}


def photograph(ui_url: str, run_id: int) -> list[Path]:
    from playwright.sync_api import expect, sync_playwright

    saved: list[Path] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": WIDTH, "height": 900})
        page.set_default_timeout(30_000)

        page.goto(f"{ui_url}/runs/{run_id}")
        expect(page.locator("#run-status")).to_have_text("succeeded")
        expect(page.locator('g.node[data-step="index-shard"]')).to_contain_text("×4")
        page.locator("tr.map-children details summary").click()
        expect(page.locator("table.children tr[data-child]")).to_have_count(4)
        saved.append(DOCS / "ui-run.png")
        page.screenshot(
            path=saved[-1],
            full_page=True,
            clip=_between(page, page.locator("h1"), page.locator("table.steps")),
        )

        charts = page.locator("figure.chart")
        expect(charts.first.locator("canvas")).to_be_visible()
        expect(page.locator("figure.chart figcaption", has_text="adapt").first).to_contain_text(
            "loss"
        )
        metrics = page.get_by_role("heading", name="Metrics", exact=True)
        # The charts and the single values (the adaptation reports ~60: a table and a list).
        last = page.locator("#single-values")
        saved.append(DOCS / "ui-metrics.png")
        page.screenshot(
            path=saved[-1],
            full_page=True,
            clip=_between(page, metrics, last if last.count() else charts.last),
        )

        # The BM25 index: produced by index, read by evaluate and adapt (hard negatives).
        row = page.locator("tr", has=page.locator("td.mono", has_text=INDEX))
        href = row.first.locator('a[href^="/artifacts/"]:not(.download)').get_attribute("href")
        page.goto(f"{ui_url}{href}")
        saved.append(DOCS / "ui-lineage.png")
        page.screenshot(path=saved[-1], full_page=True)
        browser.close()
    return saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m docs.screenshots",
        description=__doc__,
        epilog="Other options go to the demo (python -m rara_rag.demo --help).",
    )
    parser.add_argument("--run", type=int, help="a finished demo run to photograph (no demo)")
    args, demo_options = parser.parse_known_args(argv)
    if args.run is not None and demo_options:
        parser.error(f"--run photographs a finished run: no demo options ({demo_options})")
    if CHROMIUM is None:
        raise SystemExit("no chromium: apt-get install chromium, or set RARA_TEST_CHROMIUM")
    url = database_url()
    if args.run is None:
        run_demo(demo_options)
    run_id = args.run if args.run is not None else latest_demo_run(url)
    with tempfile.TemporaryDirectory() as tmp:
        ui = UiServer(url, Path(tmp) / "ui.log")  # read-only: the default
        try:
            saved = photograph(ui.url, run_id)
        finally:
            ui.stop()
    for path in saved:
        print(f"{path.relative_to(ROOT)}: {path.stat().st_size / 1024:.0f} KiB (run {run_id})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
