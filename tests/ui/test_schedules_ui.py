"""The Schedules pages in a real browser, served on a login that can only read (rara_reader):
schedules applied through `rara.schedules` with their next tick in UTC and how far off it is,
and a schedule's page with its settings, its input and the run a trigger started. With
actions on, pause and resume from that page, behind a login and its CSRF token."""

from __future__ import annotations

import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from rara.pg import schedules as schedule_sql
from rara.schedules import firing
from rara.schedules.manage import apply_schedule, trigger
from rara.schedules.model import load_schedule
from rara.ui.render import iso, when
from tests.support.definitions import noop_definition
from tests.support.ui import UiServer

NIGHTLY = """
apiVersion: rara.dev/v1alpha1
kind: WorkflowSchedule
metadata: {name: nightly-refresh}
spec:
  definition: noop
  schedule: "0 2 * * *"
  timeZone: Europe/Berlin
  input: {limit: 30, corpus: "<b>docs</b>"}
  concurrencyPolicy: Forbid
"""
PAUSED = """
apiVersion: rara.dev/v1alpha1
kind: WorkflowSchedule
metadata: {name: weekly-eval}
spec: {definition: noop, schedule: "0 6 * * 1", suspend: true}
"""


def test_the_schedules_pages_show_ticks_settings_and_runs(
    page: Any,
    ui_server: Callable[..., UiServer],
    conn: psycopg.Connection[Any],
    role_url: Callable[[str], str],
) -> None:
    from playwright.sync_api import expect

    noop_definition(conn)  # no worker: the triggered run stays pending
    apply_schedule(conn, load_schedule(NIGHTLY))
    apply_schedule(conn, load_schedule(PAUSED))
    nightly = schedule_sql.get(conn, "nightly-refresh", namespace="default")
    assert nightly is not None
    assert nightly.last_run_id is None
    ui = ui_server(url=role_url("rara_reader"))

    page.goto(ui.url + "/runs")
    page.locator("header nav a", has_text="Schedules").click()
    expect(page).to_have_url(ui.url + "/schedules")
    expect(page.locator("header nav a.here")).to_have_text("Schedules")
    row = page.locator('tr[data-schedule="nightly-refresh"]')
    expect(row).to_contain_text("noop@latest")
    expect(row).to_contain_text("0 2 * * * Europe/Berlin")
    expect(row).to_contain_text("Forbid")
    expect(row.locator('[data-field="state"]')).to_have_text("active")
    # 02:00 in Berlin is 00:00 or 01:00 UTC: the next one, named in UTC, and how far off.
    next_tick = row.locator('[data-field="next-tick"] time')
    expect(next_tick).to_have_attribute("datetime", iso(nightly.next_tick))
    expect(next_tick).to_contain_text(
        re.compile(re.escape(f"{when(nightly.next_tick)} UTC") + r" · in \d+ (min|h)")
    )
    assert re.search(r" 0[01]:00:00 UTC", next_tick.text_content() or "")
    expect(row.locator('[data-field="last-run"]')).to_have_text("")
    expect(row.locator('[data-field="missed"]')).to_have_text("0")
    paused = page.locator('tr[data-schedule="weekly-eval"]')
    expect(paused.locator('[data-field="state"]')).to_have_text("suspended")
    expect(paused.locator('[data-field="next-tick"] time')).to_have_count(0)

    run_id = trigger(conn, "nightly-refresh")
    page.reload()
    expect(row.locator('[data-field="last-run"]')).to_have_text(f"{run_id} pending")
    expect(row.locator('[data-field="last-tick"] time')).to_contain_text(" ago")

    row.locator("a", has_text="nightly-refresh").click()
    expect(page).to_have_url(ui.url + "/schedules/nightly-refresh")
    facts = page.locator("#schedule-facts")
    expect(facts).to_contain_text("0 2 * * * in Europe/Berlin")
    expect(facts).to_contain_text("300 s")
    expect(facts).to_contain_text(f"run {run_id} pending")
    # The input, highlighted as a result is; markup in it stays text.
    expect(page.locator("pre.json .j-key")).to_have_text(['"limit"', '"corpus"'])
    expect(page.locator("pre.json")).to_contain_text('"corpus": "<b>docs</b>"')
    tick = page.locator("table.ticks tbody tr").first
    expect(tick).to_contain_text("triggered")
    expect(tick.locator(f'a[href="/runs/{run_id}"]')).to_have_text(str(run_id))
    tick.locator(f'a[href="/runs/{run_id}"]').click()
    expect(page).to_have_url(f"{ui.url}/runs/{run_id}")
    expect(page.locator(".facts")).to_contain_text("schedule:nightly-refresh:")

    page.goto(ui.url + "/schedules/no-such-schedule")
    expect(page.locator("main")).to_contain_text("no schedule no-such-schedule")


def test_a_schedule_the_firing_refused_says_so_and_why(
    page: Any,
    ui_server: Callable[..., UiServer],
    conn: psycopg.Connection[Any],
    role_url: Callable[[str], str],
) -> None:
    """Refused by the firing (a cron it cannot plan): the list and the page say refused, not
    active, and the page says why and what lifts it; no next tick is promised."""
    from playwright.sync_api import expect

    noop_definition(conn)
    apply_schedule(conn, load_schedule(NIGHTLY))
    reason = "no tick of '0 2 30 2 *' within 50 years"
    assert schedule_sql.refuse(conn, "nightly-refresh", reason, namespace="default")
    conn.commit()
    ui = ui_server(url=role_url("rara_reader"))

    page.goto(ui.url + "/schedules")
    row = page.locator('tr[data-schedule="nightly-refresh"]')
    expect(row.locator('[data-field="state"]')).to_have_text("refused")
    expect(row.locator('[data-field="state"] span')).to_have_attribute("title", reason)
    expect(row.locator('[data-field="next-tick"] time')).to_have_count(0)

    page.goto(ui.url + "/schedules/nightly-refresh")
    expect(page.locator("#schedule-state")).to_have_text("refused")
    expect(page.locator("#schedule-refused")).to_contain_text(reason)
    expect(page.locator("#schedule-refused")).to_contain_text("until it is applied again")
    expect(page.locator("#next-tick")).to_have_text("none while refused")


def test_pause_and_resume_from_the_schedule_page_need_a_login_and_its_csrf(
    page: Any, ui_server: Callable[..., UiServer], conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    noop_definition(conn)
    apply_schedule(conn, load_schedule(NIGHTLY))
    token = "t0ken-for-the-schedule-test-0123"
    (tmp_path / "token").write_text(token + "\n")
    ui = ui_server("--no-read-only", "--token-file", str(tmp_path / "token"))

    def suspended() -> bool:
        row = schedule_sql.get(conn, "nightly-refresh", namespace="default")
        assert row is not None
        return row.suspended

    page.goto(ui.url + "/schedules/nightly-refresh")
    expect(page.locator("#pause")).to_have_count(0)  # anonymous: no actions
    bearer = {"authorization": "Bearer " + token, "content-type": FORM}
    assert _post(ui, "/schedules/nightly-refresh/pause", {"content-type": FORM}) in (401, 403)
    assert _post(ui, "/schedules/nightly-refresh/pause", bearer, b"csrf=forged") == 403
    assert not suspended()

    page.goto(ui.url + "/login?next=/schedules/nightly-refresh")
    page.fill("input[name=token]", token)
    page.click("form.login button")
    expect(page).to_have_url(ui.url + "/schedules/nightly-refresh")
    page.click("#pause")
    expect(page.locator(".note")).to_have_text("paused")
    expect(page.locator("#schedule-state")).to_have_text("suspended")
    expect(page.locator("#next-tick")).to_have_text("none while suspended")
    assert suspended()
    page.click("#resume")
    expect(page.locator(".note")).to_have_text("resumed")
    expect(page.locator("#schedule-state")).to_have_text("active")
    expect(page.locator("#next-tick time")).to_contain_text(" · in ")
    assert not suspended()


FORM = "application/x-www-form-urlencoded"


def _post(ui: UiServer, path: str, headers: dict[str, str], body: bytes = b"csrf=") -> int:
    request = urllib.request.Request(ui.url + path, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_schedules_with_nothing_to_fire_them_say_so(
    page: Any,
    ui_server: Callable[..., UiServer],
    conn: psycopg.Connection[Any],
    database_url: str,
    role_url: Callable[[str], str],
) -> None:
    """Active schedules and no firing process connected: the list and the page say so (not
    only "next tick in 10 h"), and a tick past by more than a minute is overdue; with
    `rara schedules run` connected, neither is said."""
    from playwright.sync_api import expect

    noop_definition(conn)
    apply_schedule(conn, load_schedule(NIGHTLY))
    conn.execute("UPDATE rara_schedules SET next_tick = now() - interval '2 minutes'")
    conn.commit()
    ui = ui_server(url=role_url("rara_reader"))
    page.goto(ui.url + "/schedules")
    banner = page.locator("#no-firing")
    expect(banner).to_contain_text("No schedule firing process is connected")
    expect(banner).to_contain_text("none has ever fired a tick here")
    row = page.locator('tr[data-schedule="nightly-refresh"]')
    expect(row.locator('[data-field="overdue"]')).to_have_text("overdue")
    page.goto(ui.url + "/schedules/nightly-refresh")
    expect(page.locator("#no-firing")).to_be_visible()
    expect(page.locator("#overdue")).to_have_text("overdue")

    stop = threading.Event()
    loop = threading.Thread(target=firing.run_forever, args=(database_url, stop), daemon=True)
    loop.start()
    try:
        for _ in range(100):  # the loop connects, then fires the overdue tick
            page.goto(ui.url + "/schedules")
            if not page.locator("#no-firing, [data-field='overdue']").count():
                break
            time.sleep(0.1)
        expect(page.locator("#no-firing")).to_have_count(0)
        expect(row.locator('[data-field="overdue"]')).to_have_count(0)
    finally:
        stop.set()
        with psycopg.connect(database_url, autocommit=True) as waker:
            waker.execute("NOTIFY rara_schedules")
        loop.join(10)
