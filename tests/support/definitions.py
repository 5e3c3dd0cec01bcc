"""Workflow definitions from Python data, applied to a test database."""

from __future__ import annotations

from typing import Any

import psycopg

from rara.definitions.parse import definition_from_object
from rara.definitions.registry import AppliedVersion, apply_definition


def definition(name: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "rara.dev/v1alpha1",
        "kind": "WorkflowDefinition",
        "metadata": {"name": name},
        "spec": {"steps": steps},
    }


def apply(conn: psycopg.Connection[Any], name: str, steps: list[dict[str, Any]]) -> AppliedVersion:
    return apply_definition(conn, definition_from_object(definition(name, steps)))
