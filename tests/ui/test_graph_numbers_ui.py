"""The demo's shape in a real browser at 1,280 px: its graph fits its box with the failed
release gate on the first screen, zooms with its buttons, and the definition page shows the
version as applied with its graph; numbers read as people read them (``1,154``,
``1.05 MiB``, ``0.4298``), the ~60 single values of an adaptation a compact table, and
results across runs one scale per chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.ui import UiServer
from tests.ui.test_browser import _run_through


def _step(key: str, capability: str, *depends_on: str) -> dict[str, Any]:
    return {
        "key": key,
        "capability": capability,
        "executor": "inprocess",
        "dependsOn": list(depends_on),
        "retry": {"maxAttempts": 1},
    }


# rag-refresh's shape (examples/rag-refresh.yaml): every input a step reads is a dependsOn.
# One name longer than its column, to be cut with an ellipsis rather than broken mid-word.
SHARD = "index-shard-of-every-cleaned-passage-of-the-corpus"
DEMO = [
    _step("collect", "test.report@1"),
    _step("clean", "test.noop@1", "collect"),
    _step(SHARD, "test.noop@1", "clean"),
    _step("index", "test.noop@1", "clean", SHARD),
    _step("evaluate", "test.noop@1", "clean", "index"),
    _step("adapt", "test.metrics@1", "clean", "index", "evaluate"),
    _step("release", "test.fail@1", "index", "evaluate", "adapt"),
]


def _adaptation_metrics() -> dict[str, float]:
    """What the demo's adaptation reports once at its end: each retriever's scores with their
    intervals (48), then its timings, sizes and counts (60 in all)."""
    found: dict[str, float] = {}
    for r, row in enumerate(("before", "after", "hybrid", "diff")):
        for c, column in enumerate(("recall@1", "recall@5", "recall@10", "mrr@10")):
            value = 0.42981451679458615 if (r, c) == (0, 1) else 0.3 + r / 10 + c / 100
            found |= {f"{row}/{column}": value, f"{row}/{column}_lo": value - 0.05}
            found[f"{row}/{column}_hi"] = value + 0.05
    found |= {"steps": 1154.0, "adapter_bytes": 1102899.0, "train_pairs": 660.0}
    found |= {"time/train_s": 61.23456, "time/eval_before_s": 2.5, "time/eval_after_s": 2.75}
    found |= {"threads": 4.0, "epochs": 2.0, "lora_layers": 12.0, "loss_first": 2.3}
    found |= {"loss_last": 0.61234, "steps_per_s": 18.85}
    assert len(found) == 60
    return found


def _demo_runs(conn: psycopg.Connection[Any], database_url: str, tmp_path: Path) -> list[int]:
    apply(conn, "demo-shape", DEMO)
    runs = []
    for n in (1, 2):
        report = {"documents": 350 + n, "characters": 1_200_000 * n, "bm25": {"mrr@10": n / 3}}
        given = {"report": report, "metrics": _adaptation_metrics(), "terminal": True}
        runs.append(start_run(conn, "demo-shape", input=given, queue_anyway=True).run_id)
    _run_through(database_url, tmp_path, conn, runs, "failed")
    return runs


# From the Metrics heading to the next one (Artifacts), in px.
METRICS_HEIGHT = """() => {
  const heads = Array.from(document.querySelectorAll('h2'));
  const at = heads.findIndex((h) => h.textContent.trim() === 'Metrics');
  return heads[at + 1].getBoundingClientRect().top - heads[at].getBoundingClientRect().top;
}"""


def _within(inner: dict[str, float], outer: dict[str, float], slack: float = 1) -> bool:
    return (
        inner["x"] >= outer["x"] - slack
        and inner["y"] >= outer["y"] - slack
        and inner["x"] + inner["width"] <= outer["x"] + outer["width"] + slack
        and inner["y"] + inner["height"] <= outer["y"] + outer["height"] + slack
    )


def test_the_demo_run_fits_shows_its_failure_and_reads_its_numbers(
    page: Any, ui_server: Any, database_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    run_id = _demo_runs(conn, database_url, tmp_path)[-1]
    ui: UiServer = ui_server()
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{ui.url}/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("failed")

    # The graph fits its box, transitive edges left out: a chain of six edges.
    view = page.locator(".dag-view").bounding_box()
    svg = page.locator("svg.dag").bounding_box()
    assert _within(svg, view), (svg, view)
    expect(page.locator("svg.dag path.edge")).to_have_count(6)
    # The failed release gate is on the first screen, inside the graph's box.
    release = page.locator('g.node.st-failed[data-step="release"]')
    box = release.bounding_box()
    assert _within(box, view), (box, view)
    assert _within(box, {"x": 0, "y": 0, "width": 1280, "height": 800}), box
    assert "dependsOn: index, evaluate, adapt" in (release.locator("title").text_content() or "")

    # Zoom: + scales up (the graph scrolls in its box), minus down, fit back into the box.
    wrap = page.locator(".dag-wrap")
    fitted = float(wrap.get_attribute("data-scale") or 0)
    assert 0.5 <= fitted < 1
    page.locator('button[data-zoom="in"]').click()
    assert float(wrap.get_attribute("data-scale") or 0) > fitted
    assert page.locator("svg.dag").bounding_box()["width"] > svg["width"] * 1.2
    page.locator('button[data-zoom="out"]').click()
    page.locator('button[data-zoom="out"]').click()
    assert float(wrap.get_attribute("data-scale") or 0) < fitted
    page.locator('button[data-zoom="fit"]').click()
    assert _within(page.locator("svg.dag").bounding_box(), page.locator(".dag-view").bounding_box())
    # Ctrl + wheel zooms around the pointer; a drag pans and is no click on the node.
    box = page.locator(".dag-view").bounding_box()
    page.mouse.move(box["x"] + 200, box["y"] + 20)
    before = float(wrap.get_attribute("data-scale") or 0)
    page.keyboard.down("Control")
    page.mouse.wheel(0, -100)
    page.keyboard.up("Control")
    wheeled = "(s) => Number(document.querySelector('.dag-wrap').dataset.scale) > s"
    page.wait_for_function(wheeled, arg=before)
    page.locator('button[data-zoom="in"]').click()
    left = page.locator(".dag-view").evaluate("(v) => v.scrollLeft")
    page.mouse.move(box["x"] + 600, box["y"] + 20)
    page.mouse.down()
    page.mouse.move(box["x"] + 300, box["y"] + 20, steps=5)
    page.mouse.up()
    assert page.locator(".dag-view").evaluate("(v) => v.scrollLeft") > left
    assert page.evaluate("location.hash") == ""
    # A click (no drag) still follows a node's link to its row.
    page.locator('button[data-zoom="fit"]').click()
    page.locator('g.node[data-step="clean"]').click()
    assert page.evaluate("location.hash") == "#step-2"

    # 60 single values: a table of the scores and a list of the rest, formatted.
    values = page.locator('section.single-values[data-values-step="adapt"]')
    expect(values.locator("table.metric-table tbody tr")).to_have_count(4)
    expect(values.locator('tr[data-row="before"] td').nth(2)).to_have_text(
        "0.4298 [0.3798, 0.4798]"
    )
    expect(values.locator('[data-metric="steps"] dd')).to_have_text("1,154")
    expect(values.locator('[data-metric="adapter_bytes"] dd')).to_have_text("1.05 MiB")
    expect(values.locator('[data-metric="time/train_s"] dd')).to_have_text("61.23")
    # The Metrics section, heading to the next heading: 1,964 px when each value was a row of
    # its own table; the whole page then 4,331 px, now 2,631 (docs/ui.md).
    section = page.evaluate(METRICS_HEIGHT)
    height = page.evaluate("document.documentElement.scrollHeight")
    print(f"Metrics section {section:.0f} px, run page {height} px at 1280 px")
    assert section < 450, section

    # A step's name never breaks inside a word: one line, cut, whole in its title.
    cell = page.locator(f'tr[data-step="{SHARD}"] td.step-key')
    expect(cell).to_have_attribute("title", SHARD)
    lines = "(c) => { const r = document.createRange(); r.selectNodeContents(c); "
    lines += "const line = parseFloat(getComputedStyle(c).lineHeight); "
    lines += "return r.getBoundingClientRect().height / line; }"
    assert cell.evaluate(lines) < 1.5  # its text is one line high
    assert cell.evaluate("(c) => c.scrollWidth > c.clientWidth")  # cut, with an ellipsis
    assert cell.evaluate("(c) => getComputedStyle(c).textOverflow") == "ellipsis"
    # Progress bars coloured by state.
    expect(page.locator('tr[data-step="clean"] progress')).to_have_attribute(
        "data-state", "succeeded"
    )
    colour = page.locator('tr[data-step="release"] progress').evaluate(
        "(p) => getComputedStyle(p).color"
    )
    assert colour == "rgb(220, 38, 38)"  # --failed


def test_the_definition_shows_its_yaml_its_graph_and_results_one_scale_each(
    page: Any, ui_server: Any, database_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    _demo_runs(conn, database_url, tmp_path)
    ui: UiServer = ui_server()
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{ui.url}/definitions/demo-shape")
    document = page.locator("#definition-yaml")
    expect(document).to_contain_text("kind: WorkflowDefinition")
    expect(document).to_contain_text("dependsOn: [index, evaluate, adapt]")
    expect(page.locator("svg.dag g.node")).to_have_count(7)
    expect(page.locator("svg.dag path.edge")).to_have_count(6)
    assert _within(page.locator("svg.dag").bounding_box(), page.locator(".dag-view").bounding_box())

    captions = page.locator("figure.chart figcaption")
    expect(captions).to_have_text(
        ["collect · documents", "collect · characters", "collect · bm25 scores"]
    )
    characters = page.locator("figure.chart").nth(1)
    labels = characters.evaluate("(f) => f.uplot.series.slice(1).map((s) => s.label)")
    assert labels == ["characters"]  # documents on an axis of their own
    # The same in both runs: a value each, formatted, not a flat chart.
    unchanged = page.locator("#unchanged-results")
    expect(unchanged.locator('[data-result="adapt:metrics/steps"] dd')).to_have_text("1,154")
    expect(unchanged.locator('[data-result="adapt:metrics/adapter_bytes"] dd')).to_have_text(
        "1.05 MiB"
    )
