"""The WorkflowDefinition document: one YAML for ``kubectl apply`` and ``rara definitions apply``.

Field names are the Kubernetes-style camelCase of the YAML; unknown fields are errors (a typo
must not silently become a default). The CRD's OpenAPI schema in ``crds/`` is checked against
these models by a test.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_serializer,
    field_validator,
    model_validator,
)

from rara.definitions import inputs
from rara.definitions.durations import DurationMs, format_duration_ms
from rara.namespaces import NAMESPACE_PATTERN

API_VERSION = "rara.dev/v1alpha1"
KIND = "WorkflowDefinition"

# name@major: the same rule the executor applies (a name starts with a letter; no leading zeros)
CAPABILITY_PATTERN = r"^[a-z][a-z0-9._-]*@(0|[1-9][0-9]*)$"
STEP_KEY_PATTERN = r"^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$"
NAME_PATTERN = r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$"

StepKey = Annotated[str, Field(pattern=STEP_KEY_PATTERN)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class RetryPolicy(_Model):
    max_attempts: int = Field(default=3, ge=1, le=1000, alias="maxAttempts")
    initial_delay: DurationMs = Field(default=1000, alias="initialDelay", validate_default=False)
    max_delay: DurationMs = Field(default=60_000, alias="maxDelay", validate_default=False)
    backoff_coefficient: float = Field(default=2.0, ge=1.0, le=100.0, alias="backoffCoefficient")

    @model_validator(mode="after")
    def _delays_ordered(self) -> RetryPolicy:
        if self.max_delay < self.initial_delay:
            raise ValueError("maxDelay must be >= initialDelay")
        return self

    @field_serializer("initial_delay", "max_delay")
    def _dump_duration(self, ms: int) -> str:
        return format_duration_ms(ms)


class Resources(_Model):
    gpu: int = Field(default=0, ge=0, le=64)
    cpu: str | None = Field(default=None, pattern=r"^\d+(\.\d+)?m?$")
    memory: str | None = Field(default=None, pattern=r"^\d+(Ki|Mi|Gi|Ti|K|M|G|T)?$")


class SecretRef(_Model):
    """A secret named by reference; its value is resolved inside the worker or executor."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,252}$")
    key: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{1,253}$")


# map.over: `input`, or `<step>.result`, then a path of keys or list indexes into it.
MAP_OVER_PATTERN = r"^(input|[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?\.result)(\.[A-Za-z0-9_-]+)*$"
# What a child's input gains (rara.context: ctx.input["item"], ctx.input["index"]).
MAP_INPUT_KEYS = ("item", "index")


class MapSpec(_Model):
    """A map step: once its upstream succeeded, one child step per element of a list."""

    over: str = Field(pattern=MAP_OVER_PATTERN)
    # Children ready or running at once; None: the database's default window, 1,000.
    max_parallel: int | None = Field(default=None, ge=1, le=100_000, alias="maxParallel")

    @property
    def source(self) -> str | None:
        """The upstream step whose result holds the list; None: the run input."""
        head = self.over.split(".", 1)[0]
        return None if head == "input" else head

    @property
    def path(self) -> list[str]:
        """The keys (or list indexes) inside the source, in order."""
        parts = self.over.split(".")
        return parts[1:] if self.source is None else parts[2:]


# concurrency.key: a value of the run's input, by its path (`input.customer`, `input.a.b`).
CONCURRENCY_KEY_PATTERN = r"^input(\.[A-Za-z0-9_-]+)+$"
CONCURRENCY_GROUP_PATTERN = r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$"


class ConcurrencySpec(_Model):
    """At most ``max`` attempts of this step running at once per value of ``key`` in its
    namespace (docs/limits.md, "Per key"): e.g. two per customer, whose API takes two clients.
    Steps (of any definition) that name the same ``group`` share the limit per value; the
    default group is the step's own (``<definition>.<step>``)."""

    key: str = Field(pattern=CONCURRENCY_KEY_PATTERN)
    max: int = Field(ge=1, le=10_000)
    group: str | None = Field(default=None, pattern=CONCURRENCY_GROUP_PATTERN)

    @property
    def path(self) -> list[str]:
        """The keys inside the run input, in order."""
        return self.key.split(".")[1:]


class CacheSpec(_Model):
    """A step whose output is a function of what went in (docs/step-cache.md): a later step
    with the same cache key reuses its result and artifacts instead of running."""

    # How long an entry may be reused; None: until dropped (or its blobs are gone). At most
    # the database's millisecond integer (rara_spec_caches), ~596 hours.
    ttl: DurationMs | None = None

    @field_validator("ttl")
    @classmethod
    def _ttl_fits(cls, ms: int | None) -> int | None:
        if ms is not None and not 0 < ms <= 2**31 - 1:
            raise ValueError("cache.ttl must be more than 0 and at most 596h")
        return ms

    @field_serializer("ttl")
    def _dump_duration(self, ms: int | None) -> str | None:
        return None if ms is None else format_duration_ms(ms)


# A wait step (docs/waits.md) runs nothing; its capability is the database's own.
WAIT_CAPABILITY = "rara.wait@1"
APPROVAL_CAPABILITY = "rara.approval@1"
# The database's own capabilities: steps of theirs are never leased, so have no attempts.
RUNS_NOTHING = frozenset({WAIT_CAPABILITY, APPROVAL_CAPABILITY})
SIGNAL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
UNTIL_PATTERN = r"^input(\.[A-Za-z0-9_-]+)+$"
SHOW_PATTERN = r"^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?(\.result(\.[A-Za-z0-9_-]+)*)?$"
# Fields that mean nothing for a step that runs nothing (the database refuses them too).
RUN_ONLY_FIELDS = (
    "map", "cache", "concurrency", "timeout", "heartbeatTimeout", "secrets", "resources",
    "inputSchema",
)  # fmt: skip


class WaitSpec(_Model):
    """A durable wait: for a duration, until a time in the run input, or for a named signal.
    It holds nothing while it waits (no lease, no worker slot, no pod): the database ends it."""

    for_: DurationMs | None = Field(default=None, alias="for")
    until: str | None = Field(default=None, pattern=UNTIL_PATTERN)
    signal: str | None = Field(default=None, pattern=SIGNAL_PATTERN)
    # A signal wait's deadline, and what then: fail the step (and the run), or go on.
    timeout: DurationMs | None = None
    on_timeout: Literal["fail", "succeed"] = Field(default="fail", alias="onTimeout")

    @model_validator(mode="after")
    def _one_kind(self) -> WaitSpec:
        kinds = [k for k, v in (("for", self.for_), ("until", self.until),
                                ("signal", self.signal)) if v is not None]  # fmt: skip
        if len(kinds) != 1:
            raise ValueError("wait needs exactly one of for:, until: and signal:")
        if self.signal is None and (self.timeout is not None or self.on_timeout == "succeed"):
            raise ValueError("wait: timeout and onTimeout are for signal waits")
        return self

    @field_serializer("for_", "timeout")
    def _dump_duration(self, ms: int | None) -> str | None:
        return None if ms is None else format_duration_ms(ms)


class ApprovalSpec(_Model):
    """A gate a person decides: it shows upstream results (the evidence, frozen when it begins
    to wait), names who may decide (logins or roles; none: any client of the namespace), and
    what a rejection or the deadline does to the run."""

    show: list[str] = Field(default_factory=list)
    approvers: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        default_factory=list
    )
    timeout: DurationMs | None = None
    on_reject: Literal["fail", "cancel"] = Field(default="fail", alias="onReject")
    on_timeout: Literal["fail", "cancel"] = Field(default="fail", alias="onTimeout")
    # Whether who started the run may not also decide (None: on for a gate after which no
    # other gate comes, the one a release waits for; off before another; docs/waits.md).
    four_eyes: bool | None = Field(default=None, alias="fourEyes")

    @field_validator("show")
    @classmethod
    def _shown_paths(cls, show: list[str]) -> list[str]:
        for entry in show:
            if not re.match(SHOW_PATTERN, entry):
                raise ValueError(f"show: {entry!r} is not <step> or <step>.result.<path>")
        return show

    @field_serializer("timeout")
    def _dump_duration(self, ms: int | None) -> str | None:
        return None if ms is None else format_duration_ms(ms)


class StepSpec(_Model):
    key: StepKey
    # Every step's but a wait's or an approval's, which get the database's own (below); a
    # default only so the schema (and the CRD) can say so: a step with neither is refused.
    capability: str = Field(default="", pattern=CAPABILITY_PATTERN)
    executor: Literal["inprocess", "grpc"] = "inprocess"
    depends_on: list[StepKey] = Field(default_factory=list, alias="dependsOn")
    timeout: DurationMs | None = None
    heartbeat_timeout: DurationMs | None = Field(default=None, alias="heartbeatTimeout")
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    resources: Resources = Field(default_factory=Resources)
    priority: int = Field(default=0, ge=-1000, le=1000)
    input: dict[str, Any] = Field(default_factory=dict)
    # A JSON Schema for the run input this step reads (rara.definitions.inputs).
    input_schema: dict[str, Any] | None = Field(default=None, alias="inputSchema")
    secrets: dict[str, SecretRef] = Field(default_factory=dict)
    # A map step (docs/map-steps.md): expands into a child per element of map.over.
    map: MapSpec | None = None
    # Off by default: a step with side effects must not be skipped (docs/step-cache.md).
    cache: CacheSpec | None = None
    # At most N running at once per value of a run input field (docs/limits.md, "Per key").
    concurrency: ConcurrencySpec | None = None
    # A step that runs nothing and waits (docs/waits.md): for time, a signal, or a person.
    wait: WaitSpec | None = None
    approval: ApprovalSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _waits_run_nothing(cls, data: Any) -> Any:
        """A wait or approval step names no capability: it gets the database's own. A step
        that runs may not take that one."""
        if not isinstance(data, dict):
            return data
        kind = "wait" if data.get("wait") is not None else None
        if data.get("approval") is not None:
            if kind:
                raise ValueError("wait and approval: a step is one or the other")
            kind = "approval"
        own = {"wait": WAIT_CAPABILITY, "approval": APPROVAL_CAPABILITY}.get(kind or "")
        if own is None:
            if data.get("capability") is None:
                raise ValueError(
                    "capability is required (name@major), unless the step is a wait: or an"
                    " approval:"
                )
            if data.get("capability") in (WAIT_CAPABILITY, APPROVAL_CAPABILITY):
                raise ValueError(f"capability {data['capability']} is the database's own")
            return data
        if data.get("capability", own) != own:
            raise ValueError(f"a {kind} step runs no capability (remove capability)")
        extra = [f for f in RUN_ONLY_FIELDS if _given(data.get(f))]
        if data.get("executor", "inprocess") != "inprocess":
            extra.append("executor")
        if extra:
            raise ValueError(f"{', '.join(extra)} do nothing for a {kind} step (remove them)")
        return {**data, "capability": own}

    @field_serializer("timeout", "heartbeat_timeout")
    def _dump_duration(self, ms: int | None) -> str | None:
        return None if ms is None else format_duration_ms(ms)

    @field_validator("input_schema")
    @classmethod
    def _schema_is_valid(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if schema is not None:
            inputs.check_schema(schema)
        return schema

    @property
    def waits(self) -> bool:
        """A step the database ends (wait: or approval:), never leased."""
        return self.wait is not None or self.approval is not None

    @model_validator(mode="after")
    def _dependencies_unique(self) -> StepSpec:
        if len(set(self.depends_on)) != len(self.depends_on):
            raise ValueError("dependsOn lists a step twice")
        if self.key in self.depends_on:
            raise ValueError(f"step {self.key!r} depends on itself")
        for shown in self.approval.show if self.approval else []:
            if shown.split(".", 1)[0] not in self.depends_on:
                raise ValueError(
                    f"step {self.key!r}: approval.show shows step {shown.split('.', 1)[0]!r},"
                    " which is not in its dependsOn"
                )
        if self.map is not None:
            source = self.map.source
            if source is not None and source not in self.depends_on:
                raise ValueError(
                    f"step {self.key!r}: map.over reads step {source!r}, which is "
                    "not in its dependsOn"
                )
            clash = sorted(set(MAP_INPUT_KEYS) & set(self.input))
            if clash:
                raise ValueError(
                    f"step {self.key!r}: input.{clash[0]} is what map gives each child; rename it"
                )
        return self


class FreshnessSpec(_Model):
    """How old what a definition makes may get (docs/freshness.md): its newest succeeded run,
    and the current release of each name its runs were promoted as."""

    max_age: DurationMs = Field(alias="maxAge")

    @field_validator("max_age")
    @classmethod
    def _sensible(cls, ms: int) -> int:
        if not 60_000 <= ms <= 366 * 86_400_000:
            raise ValueError("freshness.maxAge must be at least 1m and at most 366d (8784h)")
        return ms

    @field_serializer("max_age")
    def _dump_duration(self, ms: int) -> str:
        return format_duration_ms(ms)


class WorkflowSpec(_Model):
    steps: list[StepSpec] = Field(min_length=1, max_length=1000)
    freshness: FreshnessSpec | None = None

    @model_validator(mode="after")
    def _graph_is_a_dag(self) -> WorkflowSpec:
        keys = [step.key for step in self.steps]
        seen: set[str] = set()
        for key in keys:
            if key in seen:
                raise ValueError(f"duplicate step key {key!r}")
            seen.add(key)
        for step in self.steps:
            for dep in step.depends_on:
                if dep not in seen:
                    raise ValueError(f"step {step.key!r}: dependsOn names unknown step {dep!r}")
        cycle = _find_cycle({s.key: s.depends_on for s in self.steps})
        if cycle:
            raise ValueError("dependency cycle: " + " -> ".join(cycle))
        signals: dict[str, str] = {}
        for step in self.steps:
            if step.wait is not None and step.wait.signal is not None:
                if step.wait.signal in signals:
                    raise ValueError(
                        f"step {step.key!r}: step {signals[step.wait.signal]!r} waits for "
                        f"signal {step.wait.signal!r} already"
                    )
                signals[step.wait.signal] = step.key
        return self


class Metadata(BaseModel):
    # Kubernetes adds uid, generation, annotations…: keep only what rara needs, ignore the rest.
    model_config = ConfigDict(extra="ignore", frozen=True)
    name: str = Field(pattern=NAME_PATTERN)
    # The namespace the document names (None: the client's). rara.namespaces has the rule.
    namespace: str | None = Field(default=None, pattern=NAMESPACE_PATTERN)


class WorkflowDefinition(_Model):
    # Unknown top-level keys are refused like unknown step fields: a typo such as `sepc:` or a
    # stray block of YAML anchors must not pass as an empty or partial definition.
    api_version: Literal["rara.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["WorkflowDefinition"]
    metadata: Metadata
    spec: WorkflowSpec
    # What the API server keeps beside the spec (`kubectl get -o yaml` output): never read.
    status: dict[str, Any] | None = Field(default=None, exclude=True)

    @property
    def name(self) -> str:
        return self.metadata.name


def _given(value: Any) -> bool:
    """A field set to something (a dumped spec writes every default: null, {}, gpu 0)."""
    if isinstance(value, dict):
        return any(_given(v) for v in value.values())
    return value not in (None, 0, "")


def _find_cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """A dependency cycle as a path (first node repeated at the end), or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in graph[node]:
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in graph:
        if node not in state and (found := visit(node)):
            return found
    return None
