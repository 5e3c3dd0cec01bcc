"""The WorkflowTrigger document: one YAML for ``rara triggers apply`` (and, later, kubectl).

A trigger starts a run of a definition in its namespace when an event comes. Its spec names
the definition (and a version, else the latest at each event), the constant part of the run
input, and one kind of event, each in a block of its own: ``webhook`` (a signed HTTP delivery;
rara.triggers.webhook) or ``objects`` (a change of the objects in a folder or under an S3
prefix; rara.triggers.objects), ``release`` (a promotion) or ``runEnded`` (a run's end; both
rara.triggers.upstream). Unknown fields are errors, as in a WorkflowDefinition; each problem
names its field. docs/triggers.md has the rules.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rara.definitions.model import NAME_PATTERN, Metadata
from rara.definitions.parse import describe_problems, load_document
from rara.errors import TriggerInvalid
from rara.runs import validate_input
from rara.triggers.pointers import pointer_problem
from rara.triggers.sources import location_problem

KIND = "WorkflowTrigger"
MAX_BODY_BYTES = 1 << 20  # the largest body a webhook may be configured to take: 1 MiB
DEFAULT_BODY_BYTES = 256 << 10  # a run input's own limit (run_input_bytes) by default
# Senders sign a delivery with the time they sent it; one older (or newer) than this is a
# replay or a clock that is wrong, and is refused. Stripe, Slack and Svix use five minutes.
DEFAULT_TOLERANCE_SECONDS = 300
MAX_TOLERANCE_SECONDS = 3600
# A secret's name as Kubernetes spells one (a DNS subdomain), and its key's characters.
SECRET_NAME_PATTERN = r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$"
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]{1,253}$"
INPUT_FIELD_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]{0,127}$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class SecretRef(_Model):
    name: str = Field(pattern=SECRET_NAME_PATTERN)
    key: str | None = Field(default=None, pattern=SECRET_KEY_PATTERN)


class DebounceSpec(_Model):
    # A burst of deliveries — events within windowSeconds of each other, for one key — makes
    # one run, started windowSeconds after the last, or maxDelaySeconds after the first
    # however steady the stream. The run gets every event's input, in arrival order.
    window_seconds: int = Field(ge=1, le=86_400, alias="windowSeconds")
    max_delay_seconds: int = Field(default=3600, ge=1, le=7 * 86_400, alias="maxDelaySeconds")
    # A JSON pointer into the body whose value keys the bursts (one per repository, say);
    # None: one burst per trigger.
    key: str | None = Field(default=None, max_length=500)
    # The run input field given the events' inputs: [{<inputFrom fields>}, …].
    input_field: str = Field(default="events", pattern=INPUT_FIELD_PATTERN, alias="inputField")

    @field_validator("key")
    @classmethod
    def _pointer(cls, value: str | None) -> str | None:
        if value is not None and (problem := pointer_problem(value)) is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _delay_covers_window(self) -> DebounceSpec:
        if self.max_delay_seconds < self.window_seconds:
            raise ValueError(
                f"maxDelaySeconds ({self.max_delay_seconds}) is shorter than windowSeconds "
                f"({self.window_seconds}): a burst would never be waited for"
            )
        return self


class WebhookSpec(_Model):
    # The HMAC-SHA256 key the sender signs with, by reference: the serving process resolves
    # it (rara.secrets.resolve), the database never holds it.
    secret_ref: SecretRef = Field(alias="secretRef")
    tolerance_seconds: int = Field(
        default=DEFAULT_TOLERANCE_SECONDS, ge=1, le=MAX_TOLERANCE_SECONDS, alias="toleranceSeconds"
    )
    max_body_bytes: int = Field(
        default=DEFAULT_BODY_BYTES, ge=1, le=MAX_BODY_BYTES, alias="maxBodyBytes"
    )
    # Run input field → a JSON pointer (RFC 6901) into the delivery's JSON body; "" is the
    # whole body. A pointer the body lacks refuses the delivery, naming the field.
    input_from: dict[str, str] = Field(default_factory=dict, alias="inputFrom")
    debounce: DebounceSpec | None = None

    @field_validator("input_from")
    @classmethod
    def _pointers(cls, value: dict[str, str]) -> dict[str, str]:
        problems = []
        for field, pointer in value.items():
            if re.fullmatch(INPUT_FIELD_PATTERN, field) is None:
                problems.append(f"{field!r} is not a run input field name ({INPUT_FIELD_PATTERN})")
            elif (problem := pointer_problem(pointer)) is not None:
                problems.append(f"{field}: {problem}")
        if problems:
            raise ValueError("; ".join(problems))
        return value


class ObjectsSpec(_Model):
    # Where the objects are: an s3:// URL (a bucket and a prefix, as RARA_ARTIFACTS takes one;
    # credentials by reference in the watcher's environment), or a folder relative to the
    # watching process's --objects-root (a trigger names no path outside it).
    location: str = Field(min_length=1, max_length=1000)
    poll_seconds: int = Field(default=30, ge=1, le=86_400, alias="pollSeconds")
    # The run input field that receives the changed objects: [{key, digest, size}, …].
    input_field: str = Field(default="objects", pattern=INPUT_FIELD_PATTERN, alias="inputField")
    # A glob the key must match (fnmatch: *, ?, [ab]); None: every object.
    include: str | None = Field(default=None, min_length=1, max_length=200)
    # The most changed objects one run is given; more wait for the next pass, at once.
    max_objects: int = Field(default=1000, ge=1, le=10_000, alias="maxObjects")

    @field_validator("location")
    @classmethod
    def _location(cls, value: str) -> str:
        problem = location_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value


RunState = Literal["succeeded", "failed", "cancelled"]


def _succeeded_only() -> list[RunState]:
    return ["succeeded"]


class ReleaseSpec(_Model):
    # The release of the trigger's namespace whose promotions start a run.
    name: str = Field(pattern=NAME_PATTERN)
    on_rollback: bool = Field(default=False, alias="onRollback")  # a rollback starts one too
    poll_seconds: int = Field(default=10, ge=1, le=86_400, alias="pollSeconds")
    # The run input field given the release: {release, number, action, movedAt, run,
    # artifacts: [{step, name, digest, size, mediaType}]}.
    input_field: str = Field(default="release", pattern=INPUT_FIELD_PATTERN, alias="inputField")


class RunEndedSpec(_Model):
    # The definition of the trigger's namespace whose runs, ended in one of `states`, each
    # start a run.
    definition: str = Field(pattern=NAME_PATTERN)
    states: list[RunState] = Field(default_factory=_succeeded_only, min_length=1)
    poll_seconds: int = Field(default=10, ge=1, le=86_400, alias="pollSeconds")
    # The run input field given the ended run: {run, definition, status, finishedAt}.
    input_field: str = Field(default="upstream", pattern=INPUT_FIELD_PATTERN, alias="inputField")


class StaleSpec(_Model):
    # The definition of the trigger's namespace whose going stale (rara.freshness: its newest
    # succeeded run older than its freshness.maxAge) starts a run — a refresh, an alert.
    definition: str = Field(pattern=NAME_PATTERN)
    poll_seconds: int = Field(default=60, ge=1, le=86_400, alias="pollSeconds")
    # The run input field given {definition, maxAge, ageSeconds, run}.
    input_field: str = Field(default="stale", pattern=INPUT_FIELD_PATTERN, alias="inputField")


class TriggerSpec(_Model):
    definition: str = Field(pattern=NAME_PATTERN)
    version: int | None = Field(default=None, ge=1)  # None: the latest at each event
    input: dict[str, Any] = Field(default_factory=dict)
    suspend: bool = False
    webhook: WebhookSpec | None = None
    objects: ObjectsSpec | None = None
    release: ReleaseSpec | None = None
    run_ended: RunEndedSpec | None = Field(default=None, alias="runEnded")
    stale: StaleSpec | None = None

    @field_validator("input")
    @classmethod
    def _input_is_run_input(cls, value: dict[str, Any]) -> dict[str, Any]:
        return validate_input(value)  # the bounds of any run's input, refused at apply

    @model_validator(mode="after")
    def _one_kind(self) -> TriggerSpec:
        blocks = self._blocks()
        if len(blocks) != 1:
            raise ValueError(
                "a trigger names one kind of event: spec.webhook, spec.objects, spec.release, "
                "spec.runEnded or spec.stale"
            )
        [(field, _)] = blocks.items()
        where = "inputFrom" if field == "webhook" else "inputField"
        if self.webhook is not None and self.webhook.debounce is not None:
            where = "debounce.inputField"
        both = sorted(self.filled_by_events & set(self.input))
        if both:
            raise ValueError(
                f"spec.{field}.{where} and spec.input both set {', '.join(both)}:"
                " a run input field comes from one place"
            )
        if self.run_ended is not None and self.run_ended.definition == self.definition:
            raise ValueError(
                f"spec.runEnded.definition: the runs of {self.definition} would each start "
                "another, forever"
            )
        return self

    def _blocks(self) -> dict[str, BaseModel]:
        named = {
            "webhook": self.webhook,
            "objects": self.objects,
            "release": self.release,
            "runEnded": self.run_ended,
            "stale": self.stale,
        }
        return {field: block for field, block in named.items() if block is not None}

    @property
    def kind(self) -> Literal["webhook", "objects", "release", "run", "stale"]:
        if self.webhook is not None:
            return "webhook"
        if self.objects is not None:
            return "objects"
        if self.stale is not None:
            return "stale"
        return "release" if self.release is not None else "run"

    @property
    def config(self) -> dict[str, Any]:
        """The kind's block as stored (rara_triggers.config): defaults filled."""
        [block] = self._blocks().values()
        return block.model_dump(mode="json", by_alias=True)

    @property
    def filled_by_events(self) -> frozenset[str]:
        """The run input fields each event fills (not known at apply)."""
        if self.webhook is not None and self.webhook.debounce is not None:
            return frozenset({self.webhook.debounce.input_field})
        if self.webhook is not None:
            return frozenset(self.webhook.input_from)
        block = self.objects or self.release or self.run_ended or self.stale
        return frozenset({block.input_field}) if block is not None else frozenset()


class WorkflowTrigger(_Model):
    api_version: Literal["rara.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["WorkflowTrigger"]
    metadata: Metadata
    spec: TriggerSpec
    status: dict[str, Any] | None = Field(default=None, exclude=True)  # the API server's

    @property
    def name(self) -> str:
        return self.metadata.name


def load_trigger(text: str | bytes, source: str = "document") -> WorkflowTrigger:
    """Parse one YAML (or JSON) WorkflowTrigger; TriggerInvalid lists every problem, each
    naming its field (``spec.webhook.toleranceSeconds: …``)."""
    return trigger_from_object(load_document(text, source, TriggerInvalid), source)


def trigger_from_object(obj: Any, source: str = "document") -> WorkflowTrigger:
    if not isinstance(obj, dict):
        raise TriggerInvalid([f"{source}: a trigger must be a mapping, got {type(obj).__name__}"])
    try:
        return WorkflowTrigger.model_validate(obj)
    except ValidationError as exc:
        raise TriggerInvalid(describe_problems(exc, obj)) from None


def spec_json(spec: TriggerSpec) -> dict[str, Any]:
    """The spec as stored and shown: defaults filled, field names as written."""
    return spec.model_dump(mode="json", by_alias=True, exclude_none=True)


__all__ = [
    "KIND",
    "ObjectsSpec",
    "ReleaseSpec",
    "RunEndedSpec",
    "StaleSpec",
    "TriggerSpec",
    "WebhookSpec",
    "WorkflowTrigger",
    "load_trigger",
]
