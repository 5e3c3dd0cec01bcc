"""Small helpers shared by tests: definitions from Python data, waiting on conditions."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from bench.common import nested_plans  # (shared with the benchmarks: bench/history.py)
from rara.definitions.parse import definition_from_object
from rara.definitions.registry import AppliedVersion, apply_definition

T = TypeVar("T")
__all__ = ["apply", "buffers", "definition", "nested_plans", "wait_for"]


def definition(name: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "rara.dev/v1alpha1",
        "kind": "WorkflowDefinition",
        "metadata": {"name": name},
        "spec": {"steps": steps},
    }


def apply(conn: psycopg.Connection[Any], name: str, steps: list[dict[str, Any]]) -> AppliedVersion:
    return apply_definition(conn, definition_from_object(definition(name, steps)))


def buffers(conn: psycopg.Connection[Any], statement: str, params: dict[str, Any]) -> int:
    """Shared buffers a function call touches (rolled back): its scan node runs it whole,
    every statement inside it included."""
    with conn.transaction(force_rollback=True):
        [[plan]] = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement,
                                params).fetchall()
    node = plan[0]["Plan"]
    return int(node["Shared Hit Blocks"]) + int(node["Shared Read Blocks"])


def wait_for(
    condition: Callable[[], T],
    *,
    timeout: float = 30.0,
    interval: float = 0.02,
    what: str = "condition",
) -> T:
    """Poll a condition against a deadline (for state in another process or the database)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
