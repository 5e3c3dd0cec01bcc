"""The "Start a run" form of a definition's page (its POST: rara.ui.launch): one control per
run-input field the steps' ``inputSchema``s name (rara.definitions.inputs), their union, the
first step's declaration of a property winning. The JSON Schema type picks the control (text,
number, true/false, JSON for arrays, objects and an untyped field), the description is the
help text, and a property any schema requires is marked so. A raw JSON textarea carries what
else the input holds; the fields filled in override its keys."""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

from rara.errors import InputInvalid

FIELD_PREFIX = "in."  # a field's form name: the run input's key after it
NONCE = re.compile(r"[A-Za-z0-9_-]{16,64}")
CONTROLS = {"string": "text", "integer": "integer", "number": "number", "boolean": "boolean"}


@dataclass(frozen=True, slots=True)
class LaunchField:
    name: str  # the run input's key
    type: str  # its JSON Schema type ("" when the schema names none)
    description: str
    required: bool

    @property
    def control(self) -> str:
        """text | integer | number | boolean | json (arrays, objects, and an untyped field)."""
        return CONTROLS.get(self.type, "json")


def _type(schema: dict[str, Any]) -> str:
    declared = schema.get("type")
    if isinstance(declared, list):  # ["string", "null"]: the field is a string, or left out
        declared = next((t for t in declared if t != "null"), "")
    return declared if isinstance(declared, str) else ""


def launch_fields(spec: dict[str, Any]) -> list[LaunchField]:
    """The run-input fields the steps of ``spec`` declare, in the order they first appear."""
    found: dict[str, dict[str, Any]] = {}
    required: set[str] = set()
    for step in spec.get("steps") or []:
        schema = step.get("inputSchema") if isinstance(step, dict) else None
        if not isinstance(schema, dict):
            continue
        for name, prop in (schema.get("properties") or {}).items():
            found.setdefault(str(name), prop if isinstance(prop, dict) else {})
        required.update(str(r) for r in schema.get("required") or [])
    return [
        LaunchField(name, _type(prop), str(prop.get("description") or ""), name in required)
        for name, prop in found.items()
    ]


def launch_form(spec: dict[str, Any]) -> dict[str, Any]:
    """The definition page's ``launch``: its fields and a fresh nonce for its key."""
    return {"fields": launch_fields(spec), "nonce": secrets.token_urlsafe(18)}


def _value(field: LaunchField, text: str) -> Any:
    """The form's ``text`` as the field's JSON value; InputInvalid naming the field."""
    try:
        if field.control == "text":
            return text
        if field.control == "boolean":
            if text not in ("true", "false"):
                raise ValueError("true or false")
            return text == "true"
        if field.control == "integer":
            return int(text)
        if field.control == "number":
            return float(text)
        return json.loads(text)
    except ValueError as exc:
        what = {"integer": "an integer", "number": "a number"}.get(field.control, "JSON")
        why = str(exc) if field.control == "boolean" else f"not {what}"
        raise InputInvalid(f"input.{field.name}: {why}: {text[:80]!r}") from None


def build_input(fields: list[LaunchField], submitted: dict[str, str]) -> dict[str, Any]:
    """The run input of a submitted form: the raw JSON object, then each field filled in."""
    raw = submitted.get("raw_input", "").strip()
    try:
        run_input = json.loads(raw) if raw else {}
    except ValueError as exc:
        raise InputInvalid(f"the raw JSON input is not JSON: {exc}") from None
    if not isinstance(run_input, dict):
        kind = "null" if run_input is None else type(run_input).__name__
        raise InputInvalid(f"the raw JSON input must be a JSON object, got {kind}")
    for field in fields:
        text = submitted.get(FIELD_PREFIX + field.name, "")
        if text.strip():
            run_input[field.name] = _value(field, text.strip())
    return run_input
