"""Names, keys, messages and metrics that try to be markup render as text, on every page.

Definitions, step keys and capabilities are validated on the way in, so the hostile rows are
written straight into the database: the pages must hold even when what they read is not what
rara would have let in (an older version, a hand-made row)."""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg.types.json import Jsonb

EVIL = '<script>window.__pwned=1</script>"><img src=x onerror="window.__pwned=2">'
KEY = "</script><svg onload=window.__pwned=3>"
MESSAGE = "<img src=x onerror=alert(1)>{{7*7}}</pre></details>"


def _hostile_rows(conn: psycopg.Connection[Any]) -> int:
    conn.execute("INSERT INTO rara_definitions (namespace, name) VALUES ('default', %s)", (EVIL,))
    for version in (1, 2):
        spec = {
            "steps": [
                {"key": KEY, "capability": "evil.cap@1", "input": {"v": version}},
                {"key": EVIL, "dependsOn": [KEY], "capability": "evil.cap@1"},
            ]
        }
        # (as the owner, past rara_definition_register's checks: no run starts from these)
        conn.execute(
            "INSERT INTO rara_definition_versions (namespace, name, version, digest, spec,"
            " steps) VALUES ('default', %s, %s, %s, %s, '[]')",
            (EVIL, version, f"sha256:{version:064x}", Jsonb(spec)),
        )
    error = {
        "code": "<b>CODE</b>",
        "message": MESSAGE,
        "retryable": False,
        "cause": {"message": EVIL},
    }
    run_id = conn.execute(
        "INSERT INTO rara_runs (namespace, definition_version_id, input, idempotency_key, "
        "status, error, started_at, finished_at) "
        "SELECT namespace, id, %s, %s, 'failed', %s, now(), now() "
        "FROM rara_definition_versions WHERE version = 2 RETURNING id",
        (Jsonb({EVIL: MESSAGE}), EVIL, Jsonb(error)),
    ).fetchone()[0]
    steps = []
    for key, deps in ((KEY, []), (EVIL, [KEY])):
        steps.append(
            conn.execute(
                "INSERT INTO rara_steps (run_id, namespace, key, depends_on, capability, "
                "executor, max_attempts, retry_initial_ms, retry_max_ms, retry_coefficient, "
                "status, attempt, error, result, started_at, finished_at) "
                "VALUES (%s, 'default', %s, %s, 'evil.cap@1', "
                "'inprocess', 1, 0, 0, 1, %s, 1, %s, %s, now(), now()) RETURNING id",
                (
                    run_id,
                    key,
                    deps,
                    "failed" if deps else "succeeded",
                    Jsonb(error) if deps else None,
                    None if deps else Jsonb({EVIL: 1.5}),
                ),
            ).fetchone()[0]
        )
    for step_id in steps:
        conn.execute(
            "INSERT INTO rara_attempts (step_id, attempt, run_id, worker, lease_token, "
            "ended_at, ended_by, outcome, error) VALUES (%s, 1, %s, %s, %s, now(), "
            "%s, 'failed', %s)",
            (step_id, run_id, EVIL, uuid.uuid4(), EVIL, Jsonb(error)),
        )
        for seq, value in ((1, 0.25), (2, 0.75)):  # two values: a chart, not a table row
            conn.execute(
                "INSERT INTO rara_events (step_id, attempt, seq, kind, fraction, message, "
                "metrics) VALUES (%s, 1, %s, 'progress', 0.5, %s, %s)",
                (step_id, seq, MESSAGE, Jsonb({EVIL: value})),
            )
    digest = "sha256:" + "ab" * 32
    conn.execute("INSERT INTO rara_artifacts (digest, size) VALUES (%s, 3)", (digest,))
    # (a row from before 0012's media type CHECK, which does not hold for rows written before)
    conn.execute(
        "ALTER TABLE rara_step_artifacts DROP CONSTRAINT rara_step_artifacts_media_type_check"
    )
    conn.execute(
        "INSERT INTO rara_step_artifacts (step_id, attempt, name, digest, size, "
        "media_type) VALUES (%s, 1, 'out.html', %s, 3, %s)",
        (steps[0], digest, EVIL),
    )
    conn.execute("INSERT INTO rara_workers (id, capabilities) VALUES (%s, %s)", (EVIL, [EVIL]))
    return int(run_id)


def test_hostile_names_render_inert(
    page: Any, ui_server: Any, conn: psycopg.Connection[Any]
) -> None:
    from playwright.sync_api import expect

    run_id = _hostile_rows(conn)
    ui = ui_server()
    name = quote(EVIL, safe="")
    pages = [
        "/runs",
        f"/runs/{run_id}",
        f"/runs/{run_id}/events",
        "/definitions",
        f"/definitions/{name}",
        f"/definitions/{name}?a=1&b=2",
        "/fleet",
        "/artifacts/sha256:" + "ab" * 32,
        f"/runs?definition={name}",
    ]
    for path in pages:
        answer = page.goto(ui.url + path)
        assert answer is not None, path
        assert answer.status == 200, path
        expect(page.locator("main h1")).to_be_visible()
        assert page.evaluate("window.__pwned") is None, path
        active = (
            'main script:not([type="application/json"]), main img, main [onload], main [onerror]'
        )
        assert page.locator(active).count() == 0, path
    assert page.dialogs == []
    # …and the text is there, as text.
    page.goto(f"{ui.url}/runs/{run_id}")
    expect(page.locator(f'g.node[data-step="{json.dumps(KEY)[1:-1]}"]')).to_have_count(1)
    expect(page.locator("table.steps").get_by_text(EVIL, exact=True).first).to_be_visible()
    expect(page.locator(".error-detail summary").first).to_contain_text(MESSAGE)
    expect(page.locator("figure.chart figcaption").first).to_contain_text(KEY)
    page.locator("#events summary").click()
    expect(page.locator("details.step-events td", has_text=MESSAGE).first).to_be_attached()
    assert page.evaluate("window.__pwned") is None
    page.goto(f"{ui.url}/definitions/{name}?a=1&b=2")
    expect(page.locator("pre.diff .del").last).to_contain_text('"v": 1')
    expect(page.locator("pre.diff .add").last).to_contain_text('"v": 2')
    # Results across runs: one run's value, listed (not charted), its name as text.
    expect(page.locator("#unchanged-results dt").first).to_contain_text(f"{KEY} · {EVIL}")
    assert page.evaluate("window.__pwned") is None
    assert page.dialogs == []
