"""Workflow definitions from Python data, applied to a test database."""

from __future__ import annotations

from typing import Any

import psycopg

from rara.definitions.parse import definition_from_object
from rara.definitions.registry import AppliedVersion, apply_definition
from rara.namespaces import DEFAULT_NAMESPACE


def definition(name: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "rara.dev/v1alpha1",
        "kind": "WorkflowDefinition",
        "metadata": {"name": name},
        "spec": {"steps": steps},
    }


def apply(
    conn: psycopg.Connection[Any],
    name: str,
    steps: list[dict[str, Any]],
    *,
    namespace: str = DEFAULT_NAMESPACE,
) -> AppliedVersion:
    return apply_definition(
        conn, definition_from_object(definition(name, steps)), namespace=namespace
    )


def noop_definition(
    conn: psycopg.Connection[Any],
    name: str = "noop",
    steps: int = 1,
    capability: str = "bench.noop@1",
    executor: str = "inprocess",
    *,
    namespace: str = DEFAULT_NAMESPACE,
) -> None:
    """A chain of ``steps`` steps s0, s1, … of one capability (the benchmarks' workload and the
    history fill's definition)."""
    apply(
        conn,
        name,
        [
            {
                "key": f"s{i}",
                "capability": capability,
                "executor": executor,
                **({"dependsOn": [f"s{i - 1}"]} if i else {}),
            }
            for i in range(steps)
        ],
        namespace=namespace,
    )
