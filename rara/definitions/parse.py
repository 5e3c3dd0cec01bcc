"""YAML/JSON text → a validated WorkflowDefinition, with errors that name step and field."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import yaml
from pydantic import ValidationError

from rara.definitions.model import WorkflowDefinition, WorkflowSpec
from rara.errors import DefinitionInvalid

MAX_DOCUMENT_BYTES = 1_000_000


def load_definition(text: str | bytes) -> WorkflowDefinition:
    """Parse one YAML (or JSON) document. Raises DefinitionInvalid listing every problem."""
    if len(text) > MAX_DOCUMENT_BYTES:
        raise DefinitionInvalid([f"document: {len(text)} bytes; the limit is {MAX_DOCUMENT_BYTES}"])
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise DefinitionInvalid([f"document: not valid YAML: {exc}"]) from exc
    if len(docs) != 1:
        raise DefinitionInvalid(
            [f"document: expected exactly one YAML document, found {len(docs)}"]
        )
    return definition_from_object(docs[0])


def definition_from_object(obj: Any) -> WorkflowDefinition:
    if not isinstance(obj, dict):
        raise DefinitionInvalid(
            [f"document: a definition must be a mapping, got {type(obj).__name__}"]
        )
    try:
        return WorkflowDefinition.model_validate(obj)
    except ValidationError as exc:
        raise DefinitionInvalid(_describe(exc, obj)) from None


def spec_from_object(obj: Any) -> WorkflowSpec:
    try:
        return WorkflowSpec.model_validate(obj)
    except ValidationError as exc:
        raise DefinitionInvalid(_describe(exc, {"spec": obj}, prefix=("spec",))) from None


def canonical_spec(spec: WorkflowSpec) -> dict[str, Any]:
    """The normalised spec: defaults filled, durations in one spelling. Hash and store this."""
    return spec.model_dump(mode="json", by_alias=True)


def spec_digest(spec: WorkflowSpec) -> str:
    """sha256 of the canonical JSON: independent of key order, YAML formatting and spelling
    of equal durations (``60s`` == ``1m``)."""
    canonical = json.dumps(canonical_spec(spec), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def _describe(exc: ValidationError, obj: Any, prefix: tuple[str | int, ...] = ()) -> list[str]:
    problems = []
    for error in exc.errors():
        loc = prefix + tuple(error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        problems.append(f"{_path(loc, obj)}: {message}")
    return problems


def _path(loc: tuple[str | int, ...], obj: Any) -> str:
    """``spec.steps[2] (key 'adapt').capability`` — names the step, not only its index."""
    parts: list[str] = []
    node = obj
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
            node = node[item] if isinstance(node, list) and item < len(node) else None
            if isinstance(node, dict) and isinstance(node.get("key"), str):
                parts.append(f" (step {node['key']!r})")
        else:
            parts.append(("." if parts else "") + str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return "".join(parts) or "document"
