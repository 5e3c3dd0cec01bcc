"""A webhook delivery, judged and turned into at most one run: the rules of docs/triggers.md
without HTTP (rara.triggers.webhook serves them).

A delivery is for one trigger (namespace, name) and carries three headers: its id
(``Rara-Delivery``), the Unix time it was signed (``Rara-Timestamp``) and its signature
(``Rara-Signature: sha256=<hex>``), an HMAC-SHA256 with the trigger's secret of
``<timestamp>.<delivery id>.<body>``. The id and the time are signed with the body, so neither
a replay outside the time window nor the same body under a new id passes.

Everything happens in one transaction (``accept``): the trigger's row is held
(``trigger_take``) so a pause or a change waits for the deliveries in flight; the run starts
under an idempotency key made of the trigger and the delivery id, and the event is recorded
beside it (``trigger_event_record``). A delivery sent again — a sender's retry, a proxy's
duplicate — finds the event's run and starts nothing. An authentic delivery that cannot start
a run (its body lacks what the input needs, the schemas refuse it, the definition is gone) is
recorded as refused with the reason, which the sender is told; one that is not authentic is
recorded nowhere (anyone can send those).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

from rara.errors import InputInvalid
from rara.namespaces import qualified
from rara.pg import triggers as trigger_sql
from rara.pg.triggers import Batched
from rara.runs import validate_input
from rara.secrets import SecretNotFound, resolve
from rara.triggers import pointers
from rara.triggers.model import WebhookSpec
from rara.triggers.pointers import PointerMissing
from rara.triggers.starts import start_event

DELIVERY_HEADER = "rara-delivery"
TIMESTAMP_HEADER = "rara-timestamp"
SIGNATURE_HEADER = "rara-signature"
# A delivery id: what senders use (UUIDs, GitHub's GUIDs, Stripe's evt_…), printable and short.
DELIVERY_ID = re.compile(r"[A-Za-z0-9._:@+=-]{1,200}")
SIGNATURE = re.compile(r"sha256=([0-9a-f]{64})")
MAX_SIGNATURES = 8  # one per secret being rotated in; more is no sender's

SecretResolver = Callable[[str, str | None], str]


@dataclass(frozen=True, slots=True)
class Delivery:
    namespace: str
    trigger: str
    headers: Mapping[str, str]  # lower-case names
    body: bytes


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the sender is told: an HTTP status, and a reason or the run."""

    status: int
    reason: str | None = None
    run_id: int | None = None
    created: bool = False  # a new run (False with a run: the event's run, found again)
    seen: int = 0  # deliveries of this event recorded, this one included
    batched: Batched | None = None  # a debounced event: the burst it joined

    def as_json(self) -> dict[str, Any]:
        if self.batched is not None:
            b = self.batched
            return {
                "batch": b.batch_id,
                "due": b.due_at.isoformat(),
                "events": b.events,
                "deliveries": b.seen,
            }
        if self.run_id is None:
            return {"error": self.reason}
        return {"run": self.run_id, "created": self.created, "deliveries": self.seen}


def signature(secret: str, timestamp: str, delivery_id: str, body: bytes) -> str:
    """The ``Rara-Signature`` header's value for a delivery (what a sender computes)."""
    signed = f"{timestamp}.{delivery_id}.".encode() + body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def accept(
    conn: psycopg.Connection[Any],
    delivery: Delivery,
    *,
    now: float,
    secret_of: SecretResolver = resolve,
) -> Outcome:
    """Judge ``delivery`` at Unix time ``now`` and start its run, exactly once per delivery id;
    the Outcome says what the sender is told. ``conn`` must not be in a transaction."""
    where = qualified(delivery.namespace, delivery.trigger)
    delivery_id = delivery.headers.get(DELIVERY_HEADER, "")
    if DELIVERY_ID.fullmatch(delivery_id) is None:
        return Outcome(
            400,
            f"header Rara-Delivery: {'missing' if not delivery_id else 'not a delivery id'}"
            " (1 to 200 of A-Z a-z 0-9 . _ : @ + = -)",
        )
    with conn.transaction():
        taken = trigger_sql.take(conn, delivery.trigger, delivery_id, namespace=delivery.namespace)
        if taken is None or taken.kind != "webhook":
            return Outcome(404, f"no webhook trigger {where}")
        if taken.suspended:
            return Outcome(409, f"trigger {where} is paused: nothing started")
        config = WebhookSpec.model_validate(taken.config)
        if len(delivery.body) > config.max_body_bytes:
            return Outcome(
                413,
                f"body is {len(delivery.body)} bytes; trigger {where} takes at most "
                f"{config.max_body_bytes} (spec.webhook.maxBodyBytes)",
            )
        problem = _authentic_problem(delivery, delivery_id, config, now, secret_of)
        if problem is not None:
            return problem
        if taken.started_run_id is not None:  # delivered again: its run, nothing new
            recorded = trigger_sql.record_event(
                conn,
                delivery.trigger,
                delivery_id,
                run_id=taken.started_run_id,
                reason=None,
                namespace=delivery.namespace,
            )
            return Outcome(200, run_id=recorded.run_id, created=False, seen=recorded.seen)
        if config.debounce is not None:
            return _debounced(conn, delivery, delivery_id, config)
        begun = start_event(
            conn,
            namespace=delivery.namespace,
            trigger=delivery.trigger,
            definition=taken.definition,
            version=taken.version,
            event_key=delivery_id,
            run_input=lambda: _run_input(taken.input, config, delivery.body),
        )
    if begun.run_id is None:
        return Outcome(422, begun.reason)
    return Outcome(
        201 if begun.created else 200, run_id=begun.run_id, created=begun.created, seen=begun.seen
    )


def _authentic_problem(
    delivery: Delivery,
    delivery_id: str,
    config: WebhookSpec,
    now: float,
    secret_of: SecretResolver,
) -> Outcome | None:
    """Why the delivery is not the trigger's sender's, now (None: it is)."""
    where = qualified(delivery.namespace, delivery.trigger)
    ref = config.secret_ref
    try:
        secret = secret_of(ref.name, ref.key)
    except SecretNotFound:
        # The endpoint's own set-up, not the sender's fault: a retry may find it mounted.
        return Outcome(
            503,
            f"this endpoint cannot verify trigger {where}: its secret {ref.name!r}"
            f"{f' key {ref.key!r}' if ref.key else ''} is not available here",
        )
    timestamp = delivery.headers.get(TIMESTAMP_HEADER, "")
    if not timestamp.isdigit() or len(timestamp) > 12:
        return Outcome(401, "header Rara-Timestamp: missing or not Unix seconds")
    offered = SIGNATURE.findall(delivery.headers.get(SIGNATURE_HEADER, ""))[:MAX_SIGNATURES]
    if not offered:
        return Outcome(401, "header Rara-Signature: missing or not sha256=<64 hex digits>")
    expected = signature(secret, timestamp, delivery_id, delivery.body).removeprefix("sha256=")
    if not any(hmac.compare_digest(expected, given) for given in offered):
        return Outcome(401, "signature does not match the body, the delivery id and the time")
    drift = now - int(timestamp)
    if abs(drift) > config.tolerance_seconds:
        return Outcome(
            401,
            f"signed {abs(drift):.0f} s {'ago' if drift > 0 else 'ahead'}; trigger {where}"
            f" takes deliveries signed within {config.tolerance_seconds} s"
            " (spec.webhook.toleranceSeconds): a replay, or a clock that is off",
        )
    return None


def _debounced(
    conn: psycopg.Connection[Any], delivery: Delivery, delivery_id: str, config: WebhookSpec
) -> Outcome:
    """The event added to its burst (202), or refused (422, recorded) when its input or its
    key is not in the body."""
    assert config.debounce is not None
    try:
        payload = _payload(delivery.body)
        event_input = validate_input(_fields(config, payload))
        batch_key = _batch_key(config.debounce.key, payload)
    except InputInvalid as exc:
        trigger_sql.record_event(
            conn,
            delivery.trigger,
            delivery_id,
            run_id=None,
            reason=str(exc),
            namespace=delivery.namespace,
        )
        return Outcome(422, str(exc))
    batched = trigger_sql.batch_add(
        conn,
        delivery.trigger,
        delivery_id,
        batch_key,
        event_input,
        window_seconds=config.debounce.window_seconds,
        max_delay_seconds=config.debounce.max_delay_seconds,
        namespace=delivery.namespace,
    )
    return Outcome(202, seen=batched.seen, batched=batched)


def _run_input(constant: dict[str, Any], config: WebhookSpec, body: bytes) -> dict[str, Any]:
    """The run input: the trigger's constant input and, per ``inputFrom`` field, the body's
    value at its pointer. InputInvalid names what is missing or malformed."""
    if not config.input_from:
        return dict(constant)
    return validate_input({**constant, **_fields(config, _payload(body))})


def _payload(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputInvalid(f"body is not JSON: {exc}") from None


def _fields(config: WebhookSpec, payload: Any) -> dict[str, Any]:
    """Per ``inputFrom`` field, the body's value at its pointer."""
    fields = {}
    for field, pointer in config.input_from.items():
        try:
            fields[field] = pointers.resolve(payload, pointer)
        except PointerMissing as exc:
            raise InputInvalid(
                f"input.{field}: the body has nothing at {pointer!r} "
                f"(spec.webhook.inputFrom.{field}): {exc}"
            ) from None
    return fields


def _batch_key(pointer: str | None, payload: Any) -> str:
    """The burst an event joins: the body's value at ``debounce.key`` (None: one burst)."""
    if pointer is None:
        return ""
    try:
        value = pointers.resolve(payload, pointer)
    except PointerMissing as exc:
        raise InputInvalid(
            f"the body has nothing at {pointer!r} (spec.webhook.debounce.key): {exc}"
        ) from None
    key = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if len(key) <= 200:
        return key
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()
