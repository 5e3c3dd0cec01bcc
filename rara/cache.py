"""The step cache's key: a digest over what went into a step (docs/step-cache.md).

Defined once, here: the worker computes it for a leased step with ``cache:``
(``rara.worker.cache``), and ``rara cache explain`` compares its parts with an entry's.

The key has five parts, each digested on its own (so that an explanation can say which one
changed), then the key over the five digests by name:

- ``capability``: ``name@major``. Code that changes a step's output must bump the major
  version; nothing else invalidates an entry (an executor's code digest cannot join the key:
  it is reported after the step ran, and the key is needed before).
- ``spec``: the step's fields that reach its code besides the input: the executor kind and
  the secret references (by name, never the values). Not its timeout, retries, priority,
  resources or the cache's own ttl: they decide how it runs, not what it returns.
- ``input``: the resolved input, as ``ctx.input`` shows it: the definition's static input,
  overlaid by the run's input, and for a map child its ``item`` and ``index``.
- ``upstream``: every upstream artifact the step is given (``ctx.inputs``), in the lease's
  order, as ``[step, name, digest]``: the bytes that went in, not their names alone.
- ``version``: this rule's own version, so that a change of the rule misses every old entry.

Canonical JSON (keys sorted, no spaces, UTF-8) makes one value one digest, whatever the key
order it arrived in.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

KEY_RULE_VERSION = 1
PARTS = ("capability", "spec", "input", "upstream", "version")


def canonical_digest(value: Any) -> str:
    """``sha256:<hex>`` of ``value`` as canonical JSON."""
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class CacheKey:
    key: str
    parts: Mapping[str, str]  # part name -> its digest


def cache_key(
    *,
    capability: str,
    executor: str,
    secrets: Mapping[str, Any],
    input: Mapping[str, Any],
    upstream: Iterable[tuple[str, str, str]],
) -> CacheKey:
    """The key of a step from what goes into it; ``upstream``: ``(step, name, digest)`` in
    the order the step is given them."""
    parts = {
        "capability": canonical_digest(capability),
        "spec": canonical_digest({"executor": executor, "secrets": dict(secrets)}),
        "input": canonical_digest(dict(input)),
        "upstream": canonical_digest([list(u) for u in upstream]),
        "version": canonical_digest(KEY_RULE_VERSION),
    }
    return CacheKey(canonical_digest(parts), parts)


def describe_reuse(reused_from: Mapping[str, Any] | None) -> str:
    """Where a reused step's result came from, for people (``rara runs show``, ``watch``)."""
    if not reused_from:
        return ""
    return (
        f"{reused_from.get('via', 'cache')}: run {reused_from.get('run')} "
        f"step {reused_from.get('key')} attempt {reused_from.get('attempt')}"
    )


def changed_parts(missed: Mapping[str, str], entry: Mapping[str, str]) -> list[str]:
    """The parts of a key that differ from an entry's, in the key's order."""
    return [p for p in PARTS if missed.get(p) != entry.get(p)]
