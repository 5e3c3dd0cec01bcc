"""The run page in a real browser: what it counts, how it keeps time and stays live, what it
shows of every result, error and event, and a training curve growing while the page is open."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.runs import wait_run
from tests.support.ui import UiServer
from tests.ui.test_browser import _stop, _worker


def test_one_step_count_on_the_runs_list_and_the_run_page(
    page: Any, ui_server: Any, database_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """A map step's children are the run's steps: two steps and a map of three are five, on
    the runs list as on the run page."""
    from playwright.sync_api import expect

    apply(
        conn,
        "mapped",
        [
            {"key": "split", "capability": "test.echo@1", "executor": "inprocess"},
            {
                "key": "shard",
                "capability": "test.echo@1",
                "executor": "inprocess",
                "dependsOn": ["split"],
                "map": {"over": "input.items"},
            },
        ],
    )
    run_id = start_run(conn, "mapped", input={"items": [1, 2, 3]}, queue_anyway=True).run_id
    worker = _worker(database_url, tmp_path, conn, "ui-count-worker")
    try:
        wait_run(conn, run_id, status="succeeded")
    finally:
        _stop(worker)
    ui: UiServer = ui_server()
    page.goto(ui.url + "/runs")
    expect(page.locator(f'tr[data-run="{run_id}"] td').nth(3)).to_have_text("5/5")
    page.goto(f"{ui.url}/runs/{run_id}")
    expect(page.locator('#counts [data-count="succeeded"]')).to_have_text("5")
    expect(page.locator('#counts [data-count="total"]')).to_have_text("5")
    expect(page.locator("#counts")).to_contain_text("map step's children count as steps")
