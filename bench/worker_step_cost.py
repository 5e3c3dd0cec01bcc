"""The worker's own CPU per step: single-step no-op runs drained by worker processes, the
workers' CPU seconds (``bench.proc_cpu``) divided by the steps, beside the server's.

    .venv/bin/python -m bench.worker_step_cost [--runs 5000] [--rounds 3] [--workers 1]

Each round drains a fresh database (``bench.run.drain``, the drain of ``make bench``); the
medians of the rounds are printed last. The workers' figure is the path from lease to batched
end as the worker pays it (decoding, the attempt's task and supervision, the batched end), with
process start-up excluded.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT))  # bench.* from the repository root

from bench.common import Server, bench_database  # noqa: E402
from bench.run import drain  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix="rara-bench-logs-"))
    rows = []
    with bench_database() as url:
        server = Server(url)
        for _ in range(args.rounds):
            r = drain(server, logs, n_workers=args.workers, runs=args.runs, steps=1)
            row = {"steps_per_s": r["steps_per_s"], **r["cpu_per_step"]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(
        json.dumps(
            {"median": {k: statistics.median(r[k] for r in rows) for k in rows[0]}},
        )
    )


if __name__ == "__main__":
    main()
