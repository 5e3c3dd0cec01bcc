"""The garbage collector, set for the worker's hot path once start-up is done (``settle``).

CPython collects its youngest generation whenever the container objects made since the last
collection outnumber those freed by 700, and every generation at every hundredth of those
(given enough new long-lived objects). A lease of 100 steps makes thousands of tasks, futures,
frames and rows at once; nearly all are freed by reference counting when their step ends, yet
each such burst set collections off, and the full ones walk every object alive since start-up
— the imported modules, pydantic's and gRPC's types, ~70,000 objects. Draining a 100,000-step
backlog (``bench.tenants``, 2 workers), each worker ran ~270 collections a second, 14% of its
time, the full ones 40 to 150 ms each, every half second: the event loop's own p99 lag was 45 ms
(a 5 ms sleep's overshoot), with every notification, lease and end behind it.

- ``gc.freeze()``: what is alive when start-up is done lives as long as the process, and no
  collection walks it again (full collections: 1 to 3 ms).
- The youngest generation every 10,000 objects: a burst's objects are freed by reference
  counting before any collection looks at them, and garbage in cycles waits a little longer
  (10,000 objects: a few megabytes at most). Collections fell to ~0 per 15 s and the loop's p99
  lag to 11 to 13 ms (docs/performance.md, "The garbage collector").
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000


def settle() -> None:
    """Freeze what start-up left alive and collect the young generation less often."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
