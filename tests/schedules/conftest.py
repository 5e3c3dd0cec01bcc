"""Schedules of a one-step definition (`noop`, no worker: its runs stay pending unless a test
ends them), and moving a schedule's next tick back as an outage would leave it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from rara.schedules.manage import apply_schedule
from rara.schedules.model import schedule_from_object
from tests.support.definitions import noop_definition

MakeSchedule = Callable[..., str]


@pytest.fixture
def make_schedule(conn: psycopg.Connection[Any]) -> MakeSchedule:
    noop_definition(conn)

    def make(name: str = "every-second", **spec: Any) -> str:
        doc = {
            "apiVersion": "rara.dev/v1alpha1",
            "kind": "WorkflowSchedule",
            "metadata": {"name": name},
            "spec": {"definition": "noop", "schedule": "* * * * * *", **spec},
        }
        apply_schedule(conn, schedule_from_object(doc))
        return name

    return make


def rewind(conn: psycopg.Connection[Any], name: str, seconds: int) -> None:
    """As the owner: the schedule's next tick ``seconds`` ago, as after a firing outage."""
    conn.execute(
        "UPDATE rara_schedules SET next_tick = date_trunc('second', now()) - %s WHERE name = %s",
        (timedelta(seconds=seconds), name),
    )
