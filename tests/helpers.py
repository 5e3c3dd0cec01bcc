"""Small helpers shared by tests: definitions from Python data, waiting on conditions."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from rara.definitions.parse import definition_from_object
from rara.definitions.registry import AppliedVersion, apply_definition

T = TypeVar("T")


def definition(name: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "rara.dev/v1alpha1",
        "kind": "WorkflowDefinition",
        "metadata": {"name": name},
        "spec": {"steps": steps},
    }


def apply(conn: psycopg.Connection[Any], name: str, steps: list[dict[str, Any]]) -> AppliedVersion:
    return apply_definition(conn, definition_from_object(definition(name, steps)))


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


def nested_plans(conn: psycopg.Connection[Any], statement: str, params: dict[str, Any], *,
                 analyze: bool = False) -> list[dict[str, Any]]:
    """The plans (JSON; with ``analyze``, run and with buffers) of every statement run inside
    the functions ``statement`` calls, by auto_explain at NOTICE level; the statement is rolled
    back. Every state change is a function (db/functions/), whose statements a plain EXPLAIN of
    the call does not show."""
    plans: list[dict[str, Any]] = []

    def collect(diagnostic: psycopg.errors.Diagnostic) -> None:
        message = diagnostic.message_primary or ""
        if "plan:" in message:
            plans.append(json.loads(message.split("plan:", 1)[1]))

    conn.add_notice_handler(collect)
    try:
        with conn.transaction(force_rollback=True):
            conn.execute("LOAD 'auto_explain'")
            for setting, value in (("log_min_duration", "0"), ("log_nested_statements", "on"),
                                   ("log_format", "json"), ("log_level", "notice"),
                                   ("log_analyze", "on" if analyze else "off"),
                                   ("log_buffers", "on" if analyze else "off")):
                conn.execute(f"SET LOCAL auto_explain.{setting} = {value}")
            conn.execute(statement, params)
    finally:
        conn.remove_notice_handler(collect)
    return plans
