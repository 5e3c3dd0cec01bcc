"""A stored definition version as a YAML document a person reads (`rara definitions show`):
the spec the database keeps is normalised — every default filled in, keys in the database's
order — so it is shown as the document one would apply to get it again: each step's fields
in the model's order, and only those that differ from their defaults. Applying the output
gives the same digest (tests/cli/test_definitions_cli.py)."""

from __future__ import annotations

from typing import Any

import yaml

from rara.definitions.parse import canonical_spec, spec_from_object


def _defaults() -> tuple[dict[str, Any], dict[str, Any]]:
    """The canonical spec of a one-step definition, and its step: every default, in order."""
    spec = canonical_spec(spec_from_object({"steps": [{"key": "k", "capability": "x.y@1"}]}))
    return spec, spec["steps"][0]


def _given(
    values: dict[str, Any], defaults: dict[str, Any], keep: tuple[str, ...]
) -> dict[str, Any]:
    """``values`` in the order of ``defaults`` (then any others), less what equals its default;
    ``keep`` first, always."""
    order = [*keep, *defaults, *values]
    return {
        k: values[k]
        for k in dict.fromkeys(order)
        if k in values and (k in keep or k not in defaults or values[k] != defaults[k])
    }


def _no_nulls(value: Any) -> Any:
    """``value`` without the null fields of its mappings (a default's spelling: ``cpu: null``)."""
    if isinstance(value, dict):
        return {k: _no_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_no_nulls(v) for v in value]
    return value


# libyaml's emitter where PyYAML was built with it: the same text, four times faster (70 ms
# for a 1,000-step spec, which the dashboard's definition page shows on every view).
_Base: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_Base):  # type: ignore[valid-type,misc]
    """Lists of plain values on one line (``dependsOn: [clean, index]``), as people write them."""


def _list(dumper: yaml.SafeDumper, values: list[Any]) -> yaml.Node:
    flow = all(isinstance(v, str | int | float | bool) for v in values)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", values, flow_style=flow)


_Dumper.add_representer(list, _list)


def definition_yaml(namespace: str, name: str, spec: dict[str, Any]) -> str:
    """The WorkflowDefinition document of a stored ``spec``."""
    spec_defaults, step_defaults = _defaults()
    shown = _given(spec, spec_defaults, ("steps",))
    shown["steps"] = [
        {
            k: v if k in ("input", "inputSchema") else _no_nulls(v)
            for k, v in _given(step, step_defaults, ("key", "dependsOn", "capability")).items()
        }
        for step in spec.get("steps", [])
    ]
    for step in shown["steps"]:
        if not step.get("dependsOn"):
            step.pop("dependsOn", None)
    document = {
        "apiVersion": "rara.dev/v1alpha1",
        "kind": "WorkflowDefinition",
        "metadata": {"name": name, "namespace": namespace},
        "spec": shown,
    }
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
