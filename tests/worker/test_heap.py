"""The worker's garbage collector settings (rara.worker.heap): start-up's objects frozen, the
young generation collected every 10,000 new objects — and garbage in cycles still collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from rara.worker import heap


class Node:
    me: Node | None = None


@pytest.fixture
def restored() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restored")
def test_settle_freezes_start_up_and_still_collects_cycles() -> None:
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
