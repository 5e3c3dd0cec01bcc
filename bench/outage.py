"""Riding through a database outage: ``make bench``'s ``outage`` section (bench/run.py).

The scenario itself is tests/support/outage.py, shared with tests/e2e/test_outage.py, which
asserts what this reports. On its own:

    .venv/bin/python -m bench.outage
"""

from __future__ import annotations

import json

from tests.support.outage import OUTAGES, measure

__all__ = ["OUTAGES", "measure"]

if __name__ == "__main__":
    print(json.dumps(measure(), indent=2, default=str))
