"""The step cache's key: a digest over what went into a step (docs/step-cache.md).

Defined once, here: the worker computes it for a leased step with ``cache:``
(``rara.worker.cache``), and ``rara cache explain`` compares its parts with an entry's.

What went into a step is known in two halves. Before it runs: its code, its settings, its
input and the names of the artifacts it is given. After it ran: which of those it actually
read. An entry is stored under both (its ``key``), and found by the first half (its
``base``) with a check of the second: every artifact the entry's step read must be given to
the new step, by the same name, with the same digest. A step given many artifacts that
reads one of them (a map child that reads its own shard of a list of shards) then misses
only when that one changed. The check is a trace, as build systems verify them: a step that
read the same bytes computes the same output.

The parts, each digested on its own (so that an explanation can say which one changed):

- ``capability``: ``name@major``. Code that changes a step's output must bump the major
  version; nothing else invalidates an entry (an executor's code digest cannot join the key:
  it is reported after the step ran, and the base is needed before).
- ``spec``: the step's fields that reach its code besides the input: the executor kind and
  the secret references (by name, never the values). Not its timeout, retries, priority,
  resources or the cache's own ttl: they decide how it runs, not what it returns.
- ``input``: the resolved input, as ``ctx.input`` shows it: the definition's static input,
  overlaid by the run input the step can read, and for a map child its ``item`` and
  ``index``. The run input it can read is what its lease gives it: the fields its
  ``inputSchema`` names, or the whole run input for a step without such a schema (the
  conservative rule: what the code may read counts). Two runs whose inputs differ only in
  fields a step cannot read give it one key. (Upstream *results* reach a step only this
  way, through ``map.over``.)
- ``given``: the names of the upstream artifacts it is given, ``<step>/<name>``, sorted:
  code sees which inputs exist without reading them (a step given none and one given one
  are different steps, though neither read anything).
- ``version``: this rule's own version, so that a change of the rule misses every old entry.
- ``namespace``: the run's namespace (the database puts it in the step's ``cache:`` payload),
  so that a team reuses only entries its own runs made: the same step on the same bytes may
  still differ between teams through what the key cannot see (a secret's value behind the
  same reference), and an entry would tell one team of another's run. Absent for
  ``default``, whose keys are those of the rule before namespaces: its entries stay hits.
- ``reads``: the upstream artifacts the step read, ``{"<step>/<name>": digest}``: a subset of
  what it was given. A read of something it was not given is a read by digest, of bytes that
  cannot change, and is left out.

Canonical JSON (keys sorted, no spaces, UTF-8) makes one value one digest, whatever the key
order it arrived in. Beside the key, each input field is digested on its own (``fields``):
not part of the key, it lets an explanation name the fields of the input that differ.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rara.namespaces import DEFAULT_NAMESPACE

KEY_RULE_VERSION = 2
BASE_PARTS = ("capability", "spec", "input", "given", "version", "namespace")
PARTS = (*BASE_PARTS, "reads")


def canonical_digest(value: Any) -> str:
    """``sha256:<hex>`` of ``value`` as canonical JSON."""
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class CacheKey:
    """A step's key before it runs: what it is looked up by."""

    base: str  # the digest of ``parts``: the entries it may reuse have this base
    parts: Mapping[str, str]  # the base parts' digests, by name
    upstream: Mapping[str, str]  # every upstream artifact it is given: "<step>/<name>" -> digest
    # each field of the input, digested on its own: not in the key, for explanations only
    fields: Mapping[str, str] = field(default_factory=dict)

    @property
    def claim(self) -> str:
        """Single flight's key: two steps given the same everything compute it once."""
        return canonical_digest({"base": self.base, "upstream": dict(self.upstream)})


def cache_key(
    *,
    capability: str,
    executor: str,
    secrets: Mapping[str, Any],
    input: Mapping[str, Any],
    upstream: Mapping[str, str],
    namespace: str = DEFAULT_NAMESPACE,
) -> CacheKey:
    """The key of a step from what goes into it; ``upstream``: ``"<step>/<name>"`` -> digest
    of every upstream artifact it is given."""
    parts = {
        "capability": canonical_digest(capability),
        "spec": canonical_digest({"executor": executor, "secrets": dict(secrets)}),
        "input": canonical_digest(dict(input)),
        "given": canonical_digest(sorted(upstream)),
        "version": canonical_digest(KEY_RULE_VERSION),
    }
    if namespace != DEFAULT_NAMESPACE:
        parts["namespace"] = canonical_digest(namespace)
    fields = {name: canonical_digest(value) for name, value in input.items()}
    return CacheKey(canonical_digest(parts), parts, dict(upstream), fields)


def reads_of(key: CacheKey, digests: Iterable[str]) -> dict[str, str]:
    """The upstream artifacts a step read, from the digests it fetched."""
    read = set(digests)
    return {name: digest for name, digest in key.upstream.items() if digest in read}


def entry_key(key: CacheKey, reads: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """The key an entry is stored under, and its parts: the base's and the reads'."""
    parts = {**key.parts, "reads": canonical_digest(dict(reads))}
    return canonical_digest(parts), parts


def describe_reuse(reused_from: Mapping[str, Any] | None) -> str:
    """Where a reused step's result came from, for people (``rara runs show``, ``watch``)."""
    if not reused_from:
        return ""
    return (
        f"{reused_from.get('via', 'cache')}: run {reused_from.get('run')} "
        f"step {reused_from.get('key')} attempt {reused_from.get('attempt')}"
    )


@dataclass(frozen=True, slots=True)
class Difference:
    """How an entry differs from a step's key, component by component: the base parts, and
    the reads (one component: every artifact the entry's step read, given to the step with the
    same digest). What ``rara cache explain`` prints."""

    parts: tuple[str, ...]  # the base parts that differ, in BASE_PARTS' order
    fields: tuple[str, ...]  # of a differing input, the fields whose digests differ (if known)
    reads: tuple[str, ...]  # what the entry's step read that the step is not given as it was
    same_reads: int  # what the entry's step read that the step is given with the same digest

    @property
    def components(self) -> int:
        return len(self.parts) + (1 if self.reads else 0)

    def describe(self) -> str:
        """``input (limit), reads (clean/passages.jsonl)``, or ``nothing``."""
        named = [
            f"{p} ({', '.join(self.fields)})" if p == "input" and self.fields else p
            for p in self.parts
        ]
        if self.reads:
            named.append(f"reads ({', '.join(self.reads)})")
        return ", ".join(named) or "nothing"


def difference(
    key: CacheKey,
    entry_parts: Mapping[str, str],
    entry_reads: Mapping[str, str],
    entry_fields: Mapping[str, str] | None = None,
) -> Difference:
    """``key`` (a step's) against an entry's parts and reads, and the input fields of the step
    that wrote it (None: not known, as for a step whose run was pruned)."""
    parts = tuple(p for p in BASE_PARTS if key.parts.get(p) != entry_parts.get(p))
    fields: tuple[str, ...] = ()
    if "input" in parts and key.fields and entry_fields:
        names = sorted(set(key.fields) | set(entry_fields))
        fields = tuple(n for n in names if key.fields.get(n) != entry_fields.get(n))
    reads = tuple(sorted(n for n, d in entry_reads.items() if key.upstream.get(n) != d))
    return Difference(parts, fields, reads, len(entry_reads) - len(reads))


def best_match(differences: Iterable[Difference]) -> int | None:
    """The index of the entry that matches a step best: the fewest differing components, then
    the fewest differing input fields, then the most artifacts read with the same bytes, then
    the fewest read with other bytes; of equals, the first (the entries come newest first).
    None: no entry."""
    ranked = [
        ((d.components, len(d.fields), -d.same_reads, len(d.reads)), i)
        for i, d in enumerate(differences)
    ]
    return min(ranked)[1] if ranked else None
