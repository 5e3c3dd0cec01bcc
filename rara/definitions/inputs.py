"""What a step declares about the run input it reads, checked before a run starts.

A step may carry ``inputSchema``: a JSON Schema (draft 2020-12) for the run's input object, the
fields that step's code reads. The schema itself is checked when the definition is applied,
and a run's input against every step's schema when the run starts, so ``{"limit": -1}`` is
refused with the field named instead of failing inside the step minutes later. Schemas are
local documents: no ``$ref`` is ever fetched (jsonschema retrieves nothing unless told to).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError

from rara.errors import InputInvalid

MAX_PROBLEMS = 5  # enough to fix a typo'd input at once; a wholly wrong one needs no list


def check_schema(schema: Mapping[str, Any]) -> None:
    """Raise ValueError naming what is wrong with a declared schema."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = _path(exc.absolute_path)
        raise ValueError(
            f"not a valid JSON Schema{f' at {where}' if where else ''}: {exc.message}"
        ) from None
    for at, ref in _refs(schema, ()):
        if not ref.startswith("#"):  # a run must not start (or fail) on another host's file
            raise ValueError(
                f"{_path(at)}: only references within the schema (#/...) are allowed, not {ref!r}"
            )


def _refs(node: Any, where: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield (*where, key), value
            else:
                yield from _refs(value, (*where, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _refs(value, (*where, index))


def check_run_input(
    run_input: Mapping[str, Any],
    schemas: Iterable[tuple[str, Mapping[str, Any]]],
    filled_later: frozenset[str] = frozenset(),
) -> None:
    """Raise InputInvalid listing every field of the run input a step's schema refuses.

    ``schemas`` is (step key, schema) per step that declares one. ``filled_later``: top-level
    fields whose values come later (a trigger's, from each event): present for the check, so
    no schema misses them, and not judged, since their values are not known yet.
    """
    if filled_later:
        run_input = {**run_input, **dict.fromkeys(filled_later)}
    problems: list[str] = []
    for key, schema in schemas:
        errors = Draft202012Validator(schema).iter_errors(run_input)
        for error in sorted(errors, key=lambda e: list(map(str, e.absolute_path))):
            if error.absolute_path and error.absolute_path[0] in filled_later:
                continue
            problems.append(f"{_describe(error)} (input of step {key!r})")
    if problems:
        shown = problems[:MAX_PROBLEMS]
        more = len(problems) - len(shown)
        raise InputInvalid(
            "run input refused: " + "; ".join(shown) + (f"; and {more} more" if more else "")
        )


def _describe(error: ValidationError) -> str:
    where = _path(error.absolute_path)
    dot = "." if where and not where.startswith("[") else ""
    return f"input{dot}{where}: {error.message}"


def _path(path: Iterable[str | int]) -> str:
    """``paths[2].name``: where in a document a problem is."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
