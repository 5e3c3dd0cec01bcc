"""A WorkflowSchedule document: what it accepts, and every refusal naming its field."""

from __future__ import annotations

from typing import Any

import pytest

from rara.errors import ScheduleInvalid
from rara.schedules.model import load_schedule, schedule_from_object


def _doc(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "rara.dev/v1alpha1",
        "kind": "WorkflowSchedule",
        "metadata": {"name": "nightly"},
        "spec": {"definition": "rag-refresh", "schedule": "0 2 * * *", **spec},
    }


def test_defaults_are_filled() -> None:
    spec = schedule_from_object(_doc()).spec
    assert (spec.time_zone, spec.concurrency_policy, spec.starting_deadline_seconds) == (
        "UTC",
        "Allow",
        300,
    )
    assert (spec.successful_runs_history_limit, spec.failed_runs_history_limit) == (3, 1)


@pytest.mark.parametrize(
    ("spec", "field", "says"),
    [
        ({"schedule": "61 * * * *"}, "spec.schedule", "not a cron expression"),
        ({"schedule": "* * *"}, "spec.schedule", "not a cron expression"),
        ({"timeZone": "Mars/Olympus"}, "spec.timeZone", "not an IANA time zone"),
        ({"concurrencyPolicy": "Queue"}, "spec.concurrencyPolicy", "'Allow', 'Forbid' or"),
        ({"startingDeadlineSeconds": 0}, "spec.startingDeadlineSeconds", "greater than"),
        ({"successfulRunsHistoryLimit": -1}, "spec.successfulRunsHistoryLimit", "greater"),
        ({"input": [1]}, "spec.input", "valid dictionary"),
        ({"input": {"password": "hunter2"}}, "spec.input", "looks like a secret"),
        ({"definition": "Bad_Name"}, "spec.definition", "pattern"),
        ({"version": 0}, "spec.version", "greater than"),
        ({"cron": "* * * * *"}, "spec.cron", "Extra inputs"),
    ],
)
def test_a_bad_field_is_refused_by_name(spec: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(ScheduleInvalid) as refused:
        schedule_from_object(_doc(**spec))
    text = str(refused.value)
    assert text.startswith("invalid workflow schedule:")
    assert f"{field}:" in text
    assert says in text


def test_yaml_problems_name_the_file() -> None:
    with pytest.raises(ScheduleInvalid, match=r"s\.yaml: not valid YAML at line 2"):
        load_schedule("kind: WorkflowSchedule\n  spec: [", "s.yaml")
    with pytest.raises(ScheduleInvalid, match="kind: Input should be 'WorkflowSchedule'"):
        load_schedule(
            "apiVersion: rara.dev/v1alpha1\nkind: WorkflowRun\nmetadata: {name: a}\n"
            "spec: {definition: a, schedule: '* * * * *'}"
        )
