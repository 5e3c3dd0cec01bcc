"""The WorkflowSchedule document: one YAML for ``kubectl apply`` and ``rara schedules apply``.

Field names follow the Kubernetes CronJob where the meaning is the same (``schedule``,
``timeZone``, ``concurrencyPolicy``, ``startingDeadlineSeconds``, ``suspend``, the history
limits); unknown fields are errors, as in a WorkflowDefinition. docs/schedules.md has the
rules (ticks, daylight saving, missed ticks).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rara.definitions.model import API_VERSION, NAME_PATTERN, Metadata
from rara.definitions.parse import describe_problems, load_document
from rara.errors import ScheduleInvalid
from rara.runs import validate_input
from rara.schedules import ticks

KIND = "WorkflowSchedule"
ConcurrencyPolicy = Literal["Allow", "Forbid", "Replace"]
# A week: a firing process that was down longer than this starts afresh (its ticks missed).
MAX_STARTING_DEADLINE_SECONDS = 7 * 86_400


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ScheduleSpec(_Model):
    definition: str = Field(pattern=NAME_PATTERN)
    version: int | None = Field(default=None, ge=1)  # None: the latest at each tick
    # Cron: five fields (minute resolution) or six, seconds first (cronsim's form).
    schedule: str = Field(min_length=1, max_length=200)
    time_zone: str = Field(default="UTC", alias="timeZone")
    input: dict[str, Any] = Field(default_factory=dict)
    concurrency_policy: ConcurrencyPolicy = Field(default="Allow", alias="concurrencyPolicy")
    starting_deadline_seconds: int = Field(
        default=300, ge=1, le=MAX_STARTING_DEADLINE_SECONDS, alias="startingDeadlineSeconds"
    )
    suspend: bool = False
    successful_runs_history_limit: int = Field(
        default=3, ge=0, le=1000, alias="successfulRunsHistoryLimit"
    )
    failed_runs_history_limit: int = Field(default=1, ge=0, le=1000, alias="failedRunsHistoryLimit")

    @field_validator("schedule")
    @classmethod
    def _cron_parses(cls, value: str) -> str:
        problem = ticks.cron_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("time_zone")
    @classmethod
    def _zone_exists(cls, value: str) -> str:
        problem = ticks.zone_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("input")
    @classmethod
    def _input_is_run_input(cls, value: dict[str, Any]) -> dict[str, Any]:
        return validate_input(value)  # the bounds of any run's input, refused at apply


class WorkflowSchedule(_Model):
    api_version: Literal["rara.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["WorkflowSchedule"]
    metadata: Metadata
    spec: ScheduleSpec
    status: dict[str, Any] | None = Field(default=None, exclude=True)  # the API server's

    @property
    def name(self) -> str:
        return self.metadata.name


def load_schedule(text: str | bytes, source: str = "document") -> WorkflowSchedule:
    """Parse one YAML (or JSON) WorkflowSchedule; ScheduleInvalid lists every problem, each
    naming its field (``spec.timeZone: …``)."""
    return schedule_from_object(load_document(text, source, ScheduleInvalid), source)


def schedule_from_object(obj: Any, source: str = "document") -> WorkflowSchedule:
    if not isinstance(obj, dict):
        raise ScheduleInvalid([f"{source}: a schedule must be a mapping, got {type(obj).__name__}"])
    try:
        return WorkflowSchedule.model_validate(obj)
    except ValidationError as exc:
        raise ScheduleInvalid(describe_problems(exc, obj)) from None


def spec_json(spec: ScheduleSpec) -> dict[str, Any]:
    """The spec as stored and shown: defaults filled, field names as written."""
    return spec.model_dump(mode="json", by_alias=True)


__all__ = ["API_VERSION", "KIND", "ScheduleSpec", "WorkflowSchedule", "load_schedule"]
