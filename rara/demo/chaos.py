"""Chaos for the demo: SIGKILL and restart services at random; the reference digests."""

from __future__ import annotations

import random
import threading
from collections import Counter
from typing import Any

from rich.console import Console

from rara.demo.processes import Child


class ChaosMonkey:
    """Every few seconds, SIGKILL one of the children and start it again after a pause."""

    def __init__(
        self,
        children: list[Child],
        *,
        seed: int | None,
        console: Console,
        interval: tuple[float, float] = (4.0, 12.0),
        max_kills: int = 6,
    ) -> None:
        self.seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
        self.random = random.Random(self.seed)
        self.children = children
        self.console = console
        self.interval = interval
        self.max_kills = max_kills
        self.kills: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos", daemon=True)

    def start(self) -> None:
        self.console.print(f"chaos: seed {self.seed}")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        for child in self.children:  # whatever was down comes back for a clean shutdown
            if not child.alive():
                child.start()

    def _run(self) -> None:
        while sum(self.kills.values()) < self.max_kills:
            if self._stop.wait(self.random.uniform(*self.interval)):
                return
            victim = self.random.choice(self.children)
            victim.kill()
            self.kills[victim.name] += 1
            self.console.print(f"chaos: SIGKILL {victim.name}")
            if self._stop.wait(self.random.uniform(0.5, 2.0)):
                return
            victim.start()

    def report(self) -> str:
        kills = ", ".join(f"{n} {name}" for name, n in sorted(self.kills.items())) or "none"
        return f"chaos: seed {self.seed}; SIGKILLs: {kills}"


def deterministic_digests(limit: Any = None) -> dict[tuple[str, str], str]:
    """What collect, clean and index must produce, computed directly (no runtime involved)."""
    import hashlib
    import json
    from dataclasses import asdict

    from rara.rag import corpus, index

    docs = corpus.collect(None)
    if isinstance(limit, int):
        docs = docs[:limit]
    documents = b"".join(
        json.dumps(asdict(d), sort_keys=True, ensure_ascii=False).encode() + b"\n" for d in docs
    )
    passages = corpus.clean(docs, words=100, overlap=20)

    def digest(data: bytes) -> str:
        return "sha256:" + hashlib.sha256(data).hexdigest()

    return {
        ("collect", "documents.jsonl"): digest(documents),
        ("clean", "passages.jsonl"): digest(corpus.passages_to_jsonl(passages)),
        ("index", "index.bm25"): digest(index.build(passages).to_bytes()),
    }
