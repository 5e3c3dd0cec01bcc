"""Objects triggers on an S3 prefix, against a real S3 server (versitygw): new and changed
objects start one run, the same bytes uploaded again start none, and a server that is down is
the trigger's watch error, not a lost change."""

from __future__ import annotations

import io
from typing import Any

import psycopg

from rara.triggers.manage import apply_trigger
from rara.triggers.model import trigger_from_object
from rara.triggers.starts import PassCounts
from rara.triggers.watching import watch_due
from tests.artifacts.s3_server import S3Server
from tests.support.definitions import noop_definition

Conn = psycopg.Connection[Any]


def put(server: S3Server, bucket: str, key: str, data: bytes) -> None:
    server.client().put_object(bucket, key, io.BytesIO(data), len(data))


def watch(conn: Conn) -> PassCounts:
    conn.execute("UPDATE rara_triggers SET next_poll = now()")
    return watch_due(conn, None)


def run_keys(conn: Conn) -> list[list[str]]:
    return [
        [o["key"] for o in row[0]]
        for row in conn.execute("SELECT input -> 'objects' FROM rara_runs ORDER BY id")
    ]


def test_an_s3_prefix_starts_one_run_per_change_of_content(
    conn: Conn, s3_env: S3Server, bucket: str
) -> None:
    noop_definition(conn)
    location = s3_env.url(bucket, "incoming")
    doc = {
        "apiVersion": "rara.dev/v1alpha1",
        "kind": "WorkflowTrigger",
        "metadata": {"name": "landed"},
        "spec": {"definition": "noop", "objects": {"location": location}},
    }
    apply_trigger(conn, trigger_from_object(doc))
    put(s3_env, bucket, "incoming/a.md", b"alpha")
    put(s3_env, bucket, "incoming/deep/b.md", b"beta")
    put(s3_env, bucket, "elsewhere/c.md", b"not watched")

    assert watch(conn).started == 1
    assert run_keys(conn) == [["a.md", "deep/b.md"]]
    assert watch(conn).hashed == 0  # unchanged ETags: no bytes read

    put(s3_env, bucket, "incoming/a.md", b"alpha")  # the same bytes uploaded again
    assert watch(conn).started == 0
    put(s3_env, bucket, "incoming/a.md", b"alpha, changed")
    assert watch(conn).started == 1
    assert run_keys(conn)[-1] == ["a.md"]

    s3_env.stop()
    try:
        down = watch(conn)
        assert down.unavailable == 1
        [(error,)] = conn.execute("SELECT watch_error FROM rara_triggers").fetchall()
        assert error.startswith(f"s3://{bucket}/incoming/: ")
    finally:
        s3_env.start()
    put(s3_env, bucket, "incoming/c.md", b"gamma")
    assert watch(conn).started == 1
    assert run_keys(conn)[-1] == ["c.md"]
    assert conn.execute("SELECT watch_error FROM rara_triggers").fetchone() == (None,)
