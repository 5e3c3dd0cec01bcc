"""A run's real shape in the browser: a map step drawn as a group "key xN" (a
multiplication sign) whose children (status, duration, worker) show on demand, its row
without a meaningless "attempt 0/3", an implied edge left out, and the children
beside their map step in the timeline; a shard's lineage names only the child that read it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.runs import wait_run
from tests.support.ui import UiServer
from tests.ui.test_browser import _stop, _worker

SHARDED = [
    {"key": "collect", "capability": "test.produce@1", "executor": "inprocess"},
    {
        "key": "shards",
        "capability": "test.echo@1",
        "executor": "inprocess",
        "dependsOn": ["collect"],
        "map": {"over": "input.items"},
    },
    # Depends on collect too: an edge that skips the shards' column.
    {
        "key": "join",
        "capability": "test.consume@1",
        "executor": "inprocess",
        "dependsOn": ["collect", "shards"],
    },
]


def test_a_map_step_is_a_group_with_its_children_on_demand(
    page: Any, ui_server: Any, database_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    apply(conn, "sharded", SHARDED)
    run_id = start_run(
        conn, "sharded", queue_anyway=True, input={"text": "a corpus", "items": list("abcd")}
    ).run_id
    worker = _worker(database_url, tmp_path, conn, "ui-worker-map")
    try:
        wait_run(conn, run_id, status="succeeded")
    finally:
        _stop(worker)
    ui: UiServer = ui_server("--artifacts", str(tmp_path / "artifacts"))
    page.goto(f"{ui.url}/runs/{run_id}")

    node = page.locator('g.node[data-step="shards"]')
    expect(node.locator("text")).to_have_text("shards ×4")
    expect(node.locator("path.stack")).to_have_count(1)
    title = node.locator("title").text_content()
    for i in range(4):
        assert f"shards[{i}]: succeeded, " in title
    assert title.count(" on ui-worker-map") == 4

    row = page.locator('table.steps tr[data-step="shards"]')
    expect(row.locator("td.map")).to_have_text("map ×4")
    expect(row).not_to_contain_text("0/3")
    expect(row.locator("td.worker")).to_have_text("ui-worker-map")
    took = row.locator("td").nth(5).text_content()
    assert took.endswith("s"), took

    children = page.locator("tr.map-children")
    expect(children.locator("summary")).to_contain_text("shards ×4: 4 succeeded")
    expect(children.locator("tr[data-child]").first).to_be_hidden()  # on demand
    children.locator("summary").click()
    expect(children.locator("tr[data-child]")).to_have_count(4)
    first = children.locator('tr[data-child="shards[0]"]')
    expect(first).to_contain_text("succeeded")
    expect(first.locator("td.worker")).to_have_text("ui-worker-map")

    # Two edges: collect -> join is implied by collect -> shards -> join, so it is not drawn
    # (tests/ui/test_dag.py routes the skip edges that remain); join's tooltip still names it.
    edges = page.locator("svg.dag path.edge")
    expect(edges).to_have_count(2)
    paths = [edges.nth(i).get_attribute("d") for i in range(2)]
    assert [p.count("C") for p in paths] == [1, 1]
    join = page.locator('g.node[data-step="join"] title').text_content() or ""
    assert "dependsOn: collect, shards" in join

    # The children sit right after where their map step is, before join.
    labels = page.locator("svg.timeline text.tl-label").all_text_contents()
    assert labels == ["collect"] + [f"shards[{i}]" for i in range(4)] + ["join"]


READ_BY_SHARD = [
    {"key": "split", "capability": "test.shard@1", "executor": "inprocess"},
    {
        "key": "shards",
        "capability": "test.read_shard@1",
        "executor": "inprocess",
        "dependsOn": ["split"],
        "map": {"over": "input.items"},
    },
    {"key": "after", "capability": "test.noop@1", "executor": "inprocess", "dependsOn": ["split"]},
]


def test_a_shard_is_read_only_by_its_own_map_child(
    page: Any, ui_server: Any, database_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """Lineage from what a step read (rara_step_reads, migration 0015): a child that reads
    only its own shard is the only reader its artifact page names; ``after`` depends on the
    producer but read nothing, and is not named."""
    from playwright.sync_api import expect

    apply(conn, "lineage", READ_BY_SHARD)
    run_id = start_run(
        conn, "lineage", queue_anyway=True, input={"items": ["a", "b", "c", "d"]}
    ).run_id
    worker = _worker(database_url, tmp_path, conn, "ui-worker-lineage")
    try:
        wait_run(conn, run_id, status="succeeded")
    finally:
        _stop(worker)
    (digest,) = conn.execute(
        "SELECT m.digest FROM rara_step_artifacts m JOIN rara_steps s ON s.id = m.step_id"
        " WHERE s.run_id = %s AND m.name = 'shard-2.txt'",
        (run_id,),
    ).fetchone() or (None,)
    assert digest is not None
    ui: UiServer = ui_server("--artifacts", str(tmp_path / "artifacts"))
    page.goto(f"{ui.url}/artifacts/{digest}")
    readers = page.locator("tr[data-reader]")
    expect(readers).to_have_count(1)
    expect(readers).to_have_attribute("data-reader", "shards[2]")
    expect(readers).to_contain_text("read it")
