"""Webhook triggers of a one-step definition (`noop`, no worker: its runs stay pending), and
deliveries signed as a sender signs them."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from rara.secrets import resolve
from rara.triggers.manage import apply_trigger
from rara.triggers.model import trigger_from_object
from rara.triggers.webhook_events import Delivery, signature
from tests.support.definitions import noop_definition

SECRET = "s3cret-for-tests-only"
SECRET_ENV = {"RARA_SECRET_DOCS_HOOK": SECRET}  # secretRef {name: docs-hook}

MakeTrigger = Callable[..., str]


def trigger_document(name: str = "docs-landed", **spec: Any) -> dict[str, Any]:
    """A trigger of `noop`: a webhook (secret docs-hook) unless another kind is given."""
    other = {"objects", "release", "runEnded"} & set(spec)
    webhook = spec.pop("webhook", None if other else {})
    if webhook is not None:
        spec["webhook"] = {"secretRef": {"name": "docs-hook"}, **webhook}
    return {
        "apiVersion": "rara.dev/v1alpha1",
        "kind": "WorkflowTrigger",
        "metadata": {"name": name},
        "spec": {"definition": "noop", **spec},
    }


@pytest.fixture
def make_trigger(conn: psycopg.Connection[Any]) -> MakeTrigger:
    noop_definition(conn)

    def make(name: str = "docs-landed", **spec: Any) -> str:
        apply_trigger(conn, trigger_from_object(trigger_document(name, **spec)))
        return name

    return make


def signed_headers(
    body: bytes,
    delivery_id: str,
    *,
    secret: str = SECRET,
    at: float | None = None,
) -> dict[str, str]:
    timestamp = str(int(time.time() if at is None else at))
    return {
        "rara-delivery": delivery_id,
        "rara-timestamp": timestamp,
        "rara-signature": signature(secret, timestamp, delivery_id, body),
    }


def delivery(
    payload: Any,
    delivery_id: str,
    *,
    trigger: str = "docs-landed",
    namespace: str = "default",
    **signing: Any,
) -> Delivery:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return Delivery(namespace, trigger, signed_headers(body, delivery_id, **signing), body)


def resolve_test_secret(name: str, key: str | None) -> str:
    return resolve(name, key, env=SECRET_ENV)
