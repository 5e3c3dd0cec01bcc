"""The worker's garbage collector settings (rara.worker.heap): start-up's objects frozen, the
young generation collected every 10,000 new objects — and garbage in cycles still collected.

In a process of its own, as the worker calls it: ``settle`` collects and freezes everything the
process holds, and in the test process that is every earlier test's leftovers (a finalizer's
warning there failed this test once, for a subprocess another test had left running)."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from pathlib import Path

from rara.worker import heap

ROOT = Path(__file__).resolve().parents[2]


class Node:
    me: Node | None = None


def settled_process_checks() -> None:
    """Run by the test in a fresh interpreter (``python -c``)."""
    heap.settle()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold()[0] == heap.YOUNG_THRESHOLD
    cycle = Node()
    cycle.me = cycle
    gone = weakref.ref(cycle)
    del cycle
    assert gone() is not None  # a cycle outlives its last reference...
    kept = [Node() for _ in range(heap.YOUNG_THRESHOLD // 2)]
    assert gone() is not None  # ...past 5,000 new objects...
    kept += [Node() for _ in range(heap.YOUNG_THRESHOLD)]
    assert gone() is None  # ...until 10,000 set a collection off


def test_settle_freezes_start_up_and_still_collects_cycles() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from tests.worker.test_heap import settled_process_checks as c; c()",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
