"""What a definition's page shows of one version: the document as applied (the YAML that
`rara definitions show` prints, rara.definitions.render) and the graph of its steps, drawn
as a run's is but with no status."""

from __future__ import annotations

from typing import Any

from rara.definitions.render import definition_yaml
from rara.ui.dag import Layout, StepNode, layout


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
    """The page's ``document`` (YAML) and ``dag`` of a stored ``spec``."""
    return {"document": definition_yaml(namespace, name, spec), "dag": graph(spec)}
