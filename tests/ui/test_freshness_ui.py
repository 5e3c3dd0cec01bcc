"""A release's freshness on the dashboard's releases list: stale in its own colour, with its
age and the maximum its definition declares."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Callable
from typing import Any

import psycopg

from rara.releases import promote
from rara.runs import start_run
from tests.support.freshness import age, declared
from tests.support.runs import wait_run


def test_the_releases_list_says_which_release_is_stale(
    conn: psycopg.Connection[Any], thread_worker: Callable[..., Any], ui_server: Any
) -> None:
    declared(conn, "1h")
    thread_worker()
    run_id = start_run(conn, "refresh", queue_anyway=True).run_id
    wait_run(conn, run_id, status="succeeded")
    promote(conn, "index", run_id, namespace="default")
    ui = ui_server()
    with urllib.request.urlopen(ui.url + "/releases", timeout=10) as answer:
        fresh = answer.read().decode()
    assert 'class="badge freshness-fresh"' in fresh
    age(conn, "rara_releases", "promoted_at", 3)
    with urllib.request.urlopen(ui.url + "/releases", timeout=10) as answer:
        stale = answer.read().decode()
    assert 'class="badge freshness-stale"' in stale
    assert re.search(r"stale: 3h( \d+s)? old, at most 1h", stale)
