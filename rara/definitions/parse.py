"""YAML/JSON text → a validated WorkflowDefinition, with errors that name step and field."""

from __future__ import annotations

import json
from typing import Any

import yaml
from pydantic import ValidationError

from rara.definitions.model import WorkflowDefinition, WorkflowSpec
from rara.errors import DefinitionInvalid

MAX_DOCUMENT_BYTES = 1_000_000  # a document's text, read before it is parsed
# The database's limits on a spec (rara_limits() spec_bytes and spec_steps,
# db/functions/limits.sql; the model's steps max_length is MAX_SPEC_STEPS too), refused here
# first: the canonical spec's JSON text, in UTF-8 bytes, as the database measures it.
MAX_SPEC_BYTES = 1_000_000
MAX_SPEC_STEPS = 1000


# Fields added to the format after its first release enter the canonical form only when set,
# so that a document written before them keeps its digest (and its version) when re-applied.
# Fields added after versions were stored: absent when unset, so that the same document keeps
# its digest (and its version).
_CANONICAL_ONLY_WHEN_SET = ("inputSchema", "cache", "concurrency")
_APPROVAL_CANONICAL_ONLY_WHEN_SET = ("fourEyes",)  # the same, inside a step's approval


def load_definition(text: str | bytes, source: str = "document") -> WorkflowDefinition:
    """Parse one YAML (or JSON) document. Raises DefinitionInvalid listing every problem;
    ``source`` (a file name) is what problems with the text itself are reported against."""
    return definition_from_object(load_document(text, source), source)


def load_document(
    text: str | bytes, source: str = "document", error: type[DefinitionInvalid] = DefinitionInvalid
) -> Any:
    """The one YAML (or JSON) document of ``text``, of bounded size; ``error`` (its kind's
    DefinitionInvalid) names what is wrong with the text itself."""
    if len(text) > MAX_DOCUMENT_BYTES:
        raise error([f"{source}: {len(text)} bytes; the limit is {MAX_DOCUMENT_BYTES}"])
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise error([_yaml_problem(exc, source)]) from exc
    if len(docs) != 1:
        raise error([f"{source}: expected exactly one YAML document, found {len(docs)}"])
    return docs[0]


def _yaml_problem(exc: yaml.YAMLError, source: str) -> str:
    """``bad.yaml: not valid YAML at line 3, column 1: <problem> (<context>)`` and the line
    with a caret under the spot, as PyYAML marks it (its own text names "<unicode string>")."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    text = f"{source}: not valid YAML{where}: {problem}" + (f" ({context})" if context else "")
    snippet = mark.get_snippet() if mark is not None else None
    if snippet:
        text += "\n" + "\n".join("  " + line for line in snippet.splitlines())
    return text


def definition_from_object(obj: Any, source: str = "document") -> WorkflowDefinition:
    if not isinstance(obj, dict):
        raise DefinitionInvalid(
            [f"{source}: a definition must be a mapping, got {type(obj).__name__}"]
        )
    try:
        return WorkflowDefinition.model_validate(obj)
    except ValidationError as exc:
        raise DefinitionInvalid(describe_problems(exc, obj)) from None


def spec_from_object(obj: Any) -> WorkflowSpec:
    try:
        return WorkflowSpec.model_validate(obj)
    except ValidationError as exc:
        raise DefinitionInvalid(describe_problems(exc, {"spec": obj}, prefix=("spec",))) from None


def canonical_spec(spec: WorkflowSpec) -> dict[str, Any]:
    """The normalised spec: defaults filled, durations in one spelling (``60s`` == ``1m``),
    independent of key order and YAML formatting. What the database stores and hashes: the
    digest is its rule (``rara_spec_digest``, migration 0012), never the client's."""
    canonical = spec.model_dump(mode="json", by_alias=True)
    if canonical.get("freshness") is None:  # only when set: older specs keep their digests
        canonical.pop("freshness", None)
    for step in canonical["steps"]:
        for key in _CANONICAL_ONLY_WHEN_SET:
            if step.get(key) is None:
                step.pop(key, None)
        approval = step.get("approval")
        if isinstance(approval, dict):
            for key in _APPROVAL_CANONICAL_ONLY_WHEN_SET:
                if approval.get(key) is None:
                    approval.pop(key, None)
    size = len(json.dumps(canonical, ensure_ascii=False).encode())
    if size > MAX_SPEC_BYTES:
        raise DefinitionInvalid(
            [f"the spec is {size} bytes of JSON; the limit is {MAX_SPEC_BYTES}"]
        )
    return canonical


def describe_problems(
    exc: ValidationError, obj: Any, prefix: tuple[str | int, ...] = ()
) -> list[str]:
    """One line per problem, each naming where it is: ``spec.steps[1] (step 'adapt').key: …``."""
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
