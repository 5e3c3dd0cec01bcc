"""Throughput of LocalArtifactStore: put/get in MB/s for 1 MB and 100 MB blobs.

    .venv/bin/python bench/artifact_store.py [--root DIR] [--no-fsync] [--total-mb 200]

Each case moves about ``--total-mb`` of data (at least 3 operations). New content is
written for every put (no dedup) except in the ``put_bytes (dup)`` row, which measures the
"already stored, verify and skip" path. Reads verify the digest like production reads do.
The page cache is warm (the blob was just written), so ``get`` rows measure hashing + copy,
not the disk.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rara.artifacts.ref import ArtifactRef
from rara.artifacts.store import LocalArtifactStore

MB = 1024 * 1024


def _rate(nbytes: int, seconds: float) -> float:
    return nbytes / MB / seconds if seconds > 0 else float("inf")


def _timed(n: int, op: Callable[[int], object]) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        op(i)
    return time.perf_counter() - t0


def bench_size(
    store: LocalArtifactStore, work: Path, size: int, total: int
) -> list[tuple[str, float]]:
    n = max(3, total // size)
    base = os.urandom(size)

    def blob(i: int) -> bytes:  # distinct content per op, cheap to make
        return i.to_bytes(8, "little") + base[8:]

    payloads = [blob(i) for i in range(n)]
    rows: list[tuple[str, float]] = []

    refs: list[ArtifactRef] = []
    t = _timed(n, lambda i: refs.append(store.put_bytes(payloads[i])))
    rows.append(("put_bytes (new)", _rate(n * size, t)))

    t = _timed(n, lambda i: store.put_bytes(payloads[i]))
    rows.append(("put_bytes (dup)", _rate(n * size, t)))

    src = work / "src.bin"
    file_payloads = [b"F" + p[1:] for p in payloads]
    put_file_s = 0.0
    for p in file_payloads:
        src.write_bytes(p)
        t0 = time.perf_counter()
        store.put_file(src)
        put_file_s += time.perf_counter() - t0
    rows.append(("put_file (new)", _rate(n * size, put_file_s)))

    def write_streamed(i: int) -> None:
        data = memoryview(b"W" + payloads[i][1:])
        with store.open_writer() as w:
            for off in range(0, size, MB):
                w.write(data[off : off + MB])

    t = _timed(n, write_streamed)
    rows.append(("open_writer (new)", _rate(n * size, t)))

    t = _timed(n, lambda i: store.get_bytes(refs[i]))
    rows.append(("get_bytes", _rate(n * size, t)))

    dest = work / "dest.bin"
    t = _timed(n, lambda i: store.get_file(refs[i], dest))
    rows.append(("get_file", _rate(n * size, t)))
    dest.unlink(missing_ok=True)
    src.unlink(missing_ok=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--root", type=Path, default=None, help="directory to bench in (default: a temp dir)"
    )
    ap.add_argument("--no-fsync", action="store_true", help="durable=False (skip fsyncs)")
    ap.add_argument("--total-mb", type=int, default=200, help="data per case (default 200)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="rara-artbench-", dir=args.root))
    try:
        store = LocalArtifactStore(work / "store", durable=not args.no_fsync)
        print(f"store: {store.root}  durable={store.durable}  chunk={store.chunk_size // 1024} KiB")
        print(f"{'op':<20}{'1 MB':>12}{'100 MB':>12}   (MB/s)")
        small = bench_size(store, work, 1 * MB, args.total_mb * MB)
        large = bench_size(store, work, 100 * MB, max(args.total_mb, 300) * MB)
        for (name, a), (_, b) in zip(small, large, strict=True):
            print(f"{name:<20}{a:>12.0f}{b:>12.0f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
