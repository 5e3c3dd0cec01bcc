"""What a definition's page shows of one version: the document as applied (the YAML that
`rara definitions show` prints, rara.definitions.render) and the graph of its steps, drawn
as a run's is but with no status; and between two versions, the diff of their stored specs
and the steps it changes."""

from __future__ import annotations

import difflib
import json
from typing import Any

from rara.definitions.render import definition_yaml
from rara.ui.dag import Layout, StepNode, layout
from rara.ui.launch_form import launch_form


def graph(spec: dict[str, Any]) -> Layout:
    """The steps of ``spec`` laid out as a run of it would be."""
    return layout(
        [
            StepNode(
                str(step.get("key")),
                [str(d) for d in step.get("dependsOn") or []],
                "",
                group=bool(step.get("map")),
            )
            for step in spec.get("steps") or []
            if isinstance(step, dict)
        ]
    )


def version_view(namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The page's ``document`` (YAML), ``dag`` and ``launch`` form of a stored ``spec``."""
    return {
        "document": definition_yaml(namespace, name, spec),
        "dag": graph(spec),
        "launch": launch_form(spec),
    }


def _spec_text(spec: dict[str, Any]) -> str:
    """The stored (canonical JSON) spec, indented: the text the diff compares line by line.
    JSON, not the YAML shown: json takes 5 ms for a 1,000-step spec, and YAML's defaults left
    out would hide a change of a field to its default."""
    return json.dumps(spec, indent=2, ensure_ascii=False)


def spec_diff(old: dict[str, Any], new: dict[str, Any], old_name: str, new_name: str) -> list[str]:
    """A unified diff of two stored specs, line by line."""
    return list(
        difflib.unified_diff(
            _spec_text(old).splitlines(),
            _spec_text(new).splitlines(),
            old_name,
            new_name,
            lineterm="",
        )
    )


def changed_steps(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str]]:
    """What a diff between two specs changed, named: (step key, added | removed | changed) in
    the new spec's order, then the removed ones; ("spec", "changed") for a change outside the
    steps (a field of the definition itself)."""

    def by_key(spec: dict[str, Any]) -> dict[str, Any]:
        return {str(s.get("key")): s for s in spec.get("steps") or [] if isinstance(s, dict)}

    before, after = by_key(old), by_key(new)
    found = [
        (key, "added" if key not in before else "changed")
        for key, step in after.items()
        if before.get(key) != step
    ]
    found += [(key, "removed") for key in before if key not in after]
    rest = {k: v for k, v in old.items() if k != "steps"}
    if rest != {k: v for k, v in new.items() if k != "steps"}:
        found.append(("spec", "changed"))
    return found
