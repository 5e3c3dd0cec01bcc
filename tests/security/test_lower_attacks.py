"""The lower attacks on the newer surfaces, each tried as the weakest login that could try it.

- Releases (docs/releases.md): a client login promoted any succeeded run of the namespace
  under any release name, from any definition and past no gate. Now a name is bound to the
  definition of its first release, and a gated definition's run is released only past an
  approved gate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from rara.errors import InputInvalid
from rara.releases import get_release, promote
from tests.support.runs import define, start, wait_run

Login = Callable[[str | None], psycopg.Connection[Any]]
Conn = psycopg.Connection[Any]


def _succeeded(conn: Conn, definition: str) -> int:
    run_id = start(conn, definition)
    wait_run(conn, run_id, status="succeeded")
    return run_id


def test_a_client_cannot_promote_another_definitions_run_under_a_bound_release_name(
    conn: Conn, thread_worker: Any, login: Login
) -> None:
    thread_worker()
    define(conn, "refresh", [{"key": "index", "capability": "test.noop@1"}])
    define(conn, "scratch", [{"key": "index", "capability": "test.noop@1"}])
    promote(conn, "rag-index", _succeeded(conn, "refresh"), namespace="default")
    scratch = _succeeded(conn, "scratch")
    client = login("rara_client")
    with pytest.raises(InputInvalid, match="release rag-index is of definition refresh"):
        promote(client, "rag-index", scratch, namespace="default")
    assert get_release(conn, "rag-index", namespace="default").number == 1


def test_a_client_cannot_release_a_gated_definitions_run_from_a_version_without_the_gate(
    conn: Conn, thread_worker: Any, login: Login
) -> None:
    thread_worker()
    work = {"key": "index", "capability": "test.noop@1"}
    define(conn, "refresh", [work, {"key": "ok", "dependsOn": ["index"], "approval": {}}])
    define(conn, "refresh", [work])  # version 2: the gate removed
    ungated = _succeeded(conn, "refresh")
    client = login("rara_client")
    with pytest.raises(InputInvalid, match="definition refresh has an approval gate"):
        promote(client, "rag-index", ungated, namespace="default")
    assert conn.execute("SELECT count(*) FROM rara_releases").fetchone() == (0,)
