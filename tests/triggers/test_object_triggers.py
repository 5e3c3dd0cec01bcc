"""Objects triggers on a folder (rara.triggers.objects): one run per change of content — new
and changed files, by digest — and none for the same bytes written again, a second watcher,
a pass repeated; a folder that cannot be watched says why in the trigger's state."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara.errors import TriggerInvalid
from rara.triggers.model import trigger_from_object
from rara.triggers.starts import PassCounts
from rara.triggers.watching import watch_due
from tests.support.definitions import apply
from tests.triggers.conftest import MakeTrigger, trigger_document

Conn = psycopg.Connection[Any]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "root" / "docs").mkdir(parents=True)
    return tmp_path / "root"


def due(conn: Conn) -> None:
    """As the owner: every objects trigger due now (as its poll interval passing would)."""
    conn.execute("UPDATE rara_triggers SET next_poll = now() WHERE kind = 'objects'")


def watch(conn: Conn, root: Path | None) -> PassCounts:
    due(conn)
    return watch_due(conn, root)


def runs(conn: Conn) -> list[tuple[str, list[dict[str, Any]]]]:
    return [
        (r[0], r[1])
        for r in conn.execute(
            "SELECT idempotency_key, input -> 'objects' FROM rara_runs ORDER BY id"
        ).fetchall()
    ]


def keys(run_objects: list[dict[str, Any]]) -> list[str]:
    return [o["key"] for o in run_objects]


def test_each_change_of_content_starts_one_run(
    conn: Conn, make_trigger: MakeTrigger, root: Path
) -> None:
    (root / "docs" / "a.md").write_text("alpha")
    (root / "docs" / "sub").mkdir()
    (root / "docs" / "sub" / "b.md").write_text("beta")
    make_trigger("docs-changed", objects={"location": "docs"})

    first = watch(conn, root)
    assert (first.started, first.hashed) == (1, 2)
    [(key, objects)] = runs(conn)
    assert key == "trigger:docs-changed:objects-1"
    assert objects == [
        {
            "key": "a.md",
            "digest": "sha256:8ed3f6ad685b959ead7022518e1af76cd816f8e8ec7ccdda1ed4018e8f2223f8",
            "size": 5,
        },
        {"key": "sub/b.md", "digest": objects[1]["digest"], "size": 4},
    ]

    again = watch(conn, root)  # nothing changed: nothing read, nothing started
    assert (again.started, again.hashed, again.unchanged) == (0, 0, 1)

    b = root / "docs" / "sub" / "b.md"
    stamp = b.stat().st_mtime_ns
    b.write_text("beta")  # the same bytes written again
    os.utime(b, ns=(stamp + 10**9, stamp + 10**9))
    same = watch(conn, root)
    assert (same.started, same.hashed) == (0, 1)  # read once, no run
    assert watch(conn, root).hashed == 0  # and not read again

    (root / "docs" / "a.md").write_text("alpha, changed")
    (root / "docs" / "c.md").write_text("gamma")
    changed = watch(conn, root)
    assert changed.started == 1
    assert keys(runs(conn)[-1][1]) == ["a.md", "c.md"]

    (root / "docs" / "a.md").write_text("alpha")  # back to the first bytes: a change too
    os.utime(root / "docs" / "a.md", ns=(stamp + 3 * 10**9, stamp + 3 * 10**9))
    assert watch(conn, root).started == 1
    assert [k for k, _ in runs(conn)] == [
        "trigger:docs-changed:objects-1",
        "trigger:docs-changed:objects-2",
        "trigger:docs-changed:objects-3",
    ]
    (root / "docs" / "c.md").unlink()  # a removal is no event
    assert watch(conn, root).started == 0


def test_two_watchers_at_once_start_one_run_for_one_change(
    database_url: str, conn: Conn, make_trigger: MakeTrigger, root: Path
) -> None:
    for i in range(20):
        (root / "docs" / f"{i:02}.md").write_text(f"doc {i}")
    make_trigger("docs-changed", objects={"location": "docs"})
    due(conn)
    barrier = threading.Barrier(4)
    counts: list[PassCounts] = []

    def watcher() -> None:
        with psycopg.connect(database_url, autocommit=True) as own:
            barrier.wait(10)
            counts.append(watch_due(own, root))

    threads = [threading.Thread(target=watcher) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(c.started for c in counts) == 1
    assert len(runs(conn)) == 1
    assert len(runs(conn)[0][1]) == 20


def test_include_and_max_objects(conn: Conn, make_trigger: MakeTrigger, root: Path) -> None:
    for name in ("a.md", "b.md", "c.md", "skip.txt"):
        (root / "docs" / name).write_text(name)
    make_trigger(
        "docs-changed",
        objects={"location": "docs", "include": "*.md", "maxObjects": 2},
    )
    watch(conn, root)
    assert keys(runs(conn)[0][1]) == ["a.md", "b.md"]
    # the rest is due at once, not after the poll interval
    assert conn.execute(
        "SELECT next_poll <= now() FROM rara_triggers WHERE name = 'docs-changed'"
    ).fetchone() == (True,)
    watch_due(conn, root)
    assert keys(runs(conn)[1][1]) == ["c.md"]
    assert watch(conn, root).started == 0


def test_a_folder_that_cannot_be_watched_says_why_and_starts_nothing(
    conn: Conn, make_trigger: MakeTrigger, root: Path
) -> None:
    make_trigger("docs-changed", objects={"location": "missing"})
    counts = watch(conn, root)
    assert counts.unavailable == 1
    [(error,)] = conn.execute("SELECT watch_error FROM rara_triggers").fetchall()
    assert error.startswith("folder missing: No such file or directory")

    (root / "missing").symlink_to(root.parent)  # a link out of the root is not followed
    watch(conn, root)
    [(error,)] = conn.execute("SELECT watch_error FROM rara_triggers").fetchall()
    assert error == "folder missing: not a folder below the root"

    watch(conn, None)
    [(error,)] = conn.execute("SELECT watch_error FROM rara_triggers").fetchall()
    assert "this process watches no folders" in error
    assert runs(conn) == []


def test_a_change_whose_run_is_refused_is_recorded_with_the_reason(
    conn: Conn, make_trigger: MakeTrigger, root: Path
) -> None:
    schema = {"type": "object", "properties": {"objects": {"type": "array", "maxItems": 1}}}
    apply(conn, "ingest", [{"key": "collect", "capability": "c@1", "inputSchema": schema}])
    make_trigger("docs-changed", definition="ingest", objects={"location": "docs"})
    (root / "docs" / "a.md").write_text("a")
    (root / "docs" / "b.md").write_text("b")
    assert watch(conn, root).refused == 1
    [(outcome, reason)] = conn.execute("SELECT outcome, reason FROM rara_trigger_events").fetchall()
    assert outcome == "refused"
    assert "input.objects: [" in reason
    assert "is too long (input of step 'collect')" in reason
    assert runs(conn) == []


@pytest.mark.parametrize(
    ("objects", "problem"),
    [
        ({"location": "/etc"}, "relative to the watcher's --objects-root"),
        ({"location": "docs/../../etc"}, "without '..'"),
        ({"location": "s3://user:pw@bucket/x"}, "credentials do not belong"),
        ({"location": "docs", "pollSeconds": 0}, "spec.objects.pollSeconds"),
        ({"location": "docs", "inputField": "no spaces"}, "spec.objects.inputField"),
    ],
)
def test_a_bad_objects_block_is_refused_naming_its_field(
    objects: dict[str, Any], problem: str
) -> None:
    doc = trigger_document(objects=objects)
    with pytest.raises(TriggerInvalid) as refused:
        trigger_from_object(doc)
    assert problem in str(refused.value)


def test_a_trigger_names_one_kind() -> None:
    doc = trigger_document(objects={"location": "docs"}, webhook={})
    with pytest.raises(TriggerInvalid) as both:
        trigger_from_object(doc)
    kinds = "spec.webhook, spec.objects, spec.release, spec.runEnded or spec.stale"
    assert f"one kind of event: {kinds}" in str(both.value)
