"""Namespaces: every definition, run and schedule lives in one (migration 0017,
docs/namespaces.md). A namespace is a team's: on Kubernetes the namespace of its resources,
elsewhere what the client says (``Client(namespace=…)``, the CLI's ``--namespace``,
``RARA_NAMESPACE``), ``default`` unless said. The name rule is Kubernetes' for a namespace (a
DNS-1123 label), so every Kubernetes namespace is one here, and the database checks the same
rule (rara_definitions_namespace_check)."""

from __future__ import annotations

import os
import re

from rara.errors import InputInvalid

DEFAULT_NAMESPACE = "default"
ENV = "RARA_NAMESPACE"
NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_LABEL = re.compile(NAMESPACE_PATTERN)


def check_namespace(value: str, *, source: str = "namespace") -> str:
    """``value`` when it is a namespace name; InputInvalid naming ``source`` (the flag, the
    variable) otherwise."""
    if not isinstance(value, str) or not _LABEL.match(value):
        raise InputInvalid(
            f"{source} {value!r} is not a namespace name: lower-case letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters"
        )
    return value


def namespace_from(explicit: str | None = None) -> str:
    """The namespace a client works in: ``explicit`` when given, else ``RARA_NAMESPACE``, else
    ``default``; checked either way."""
    if explicit is not None:
        return check_namespace(explicit)
    from_env = os.environ.get(ENV)
    if from_env:
        return check_namespace(from_env, source=ENV)
    return DEFAULT_NAMESPACE


def document_namespace(declared: str | None, client: str, *, explicit: bool, what: str) -> str:
    """The namespace a document (``what``: its kind and name) is applied in: the one its
    ``metadata.namespace`` names, else the client's. A client told its namespace explicitly
    (``--namespace``, ``Client(namespace=…)``) refuses a document that names another, as
    kubectl does, rather than write it where the caller did not look."""
    if declared is None:
        return client
    if explicit and declared != client:
        raise InputInvalid(
            f"{what}: metadata.namespace is {declared!r} but the namespace given is {client!r}"
        )
    return declared


def qualified(namespace: str, name: str) -> str:
    """How messages name a thing of a namespace: ``name`` in ``default`` (as before namespaces
    were), ``namespace/name`` elsewhere (kubectl's spelling)."""
    return name if namespace == DEFAULT_NAMESPACE else f"{namespace}/{name}"
