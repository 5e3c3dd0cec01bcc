"""Status conditions, replaced by type (the Kubernetes convention, as in metav1.Condition)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, overload


def now_rfc3339() -> str:
    return rfc3339(datetime.now(UTC))


@overload
def rfc3339(value: datetime) -> str: ...
@overload
def rfc3339(value: None) -> None: ...
def rfc3339(value: datetime | None) -> str | None:
    """A status timestamp: UTC to the second, as Kubernetes writes its own; None stays None."""
    return None if value is None else value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(
    type_: str, ok: bool, reason: str, message: str, generation: int | None
) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
    }


def merge(
    existing: Iterable[Mapping[str, Any]] | None, *updates: dict[str, Any], now: str | None = None
) -> list[dict[str, Any]]:
    """The conditions with each update replacing the one of its type.

    lastTransitionTime moves only when the status flips: it answers "since when is this
    Ready?", not "when did the operator last look?".
    """
    stamp = now or now_rfc3339()
    by_type = {c["type"]: dict(c) for c in existing or () if "type" in c}
    for update in updates:
        old = by_type.get(update["type"])
        changed = old is None or old.get("status") != update["status"]
        since = (
            stamp
            if changed or not old or not old.get("lastTransitionTime")
            else old["lastTransitionTime"]
        )
        by_type[update["type"]] = {**update, "lastTransitionTime": since}
    return sorted(by_type.values(), key=lambda c: str(c["type"]))
