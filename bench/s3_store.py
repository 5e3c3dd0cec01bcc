"""Artifact store throughput, local directory vs S3 server: put/get MB/s and peak RSS.

    .venv/bin/python bench/s3_store.py [--sizes 1,64,1024] [--total-mb 256]

For each blob size (MiB) and store, a fresh process writes ``--total-mb`` of new content
(at least one blob) with ``put_file`` and reads it back with ``get_file``, both streamed and
verified as in production; it reports MB/s and its peak RSS (``ru_maxrss``) after the puts,
i.e. during the largest put, and its RSS before any (imports, client). The S3 store talks to
versitygw (``.ci/go-tool.sh versitygw``) on 127.0.0.1 whose data directory is on the same disk
as the local store's; the local store fsyncs (its default). Both hash every byte on write and
read.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20


def _rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _write_blob(path: Path, size: int, seed: int) -> None:
    block = os.urandom(MIB)
    with open(path, "wb") as f:
        f.write(seed.to_bytes(8, "little"))  # distinct content per blob: no dedup
        left = size - 8
        while left > 0:
            n = min(left, MIB)
            f.write(block[:n])
            left -= n


def _one(store_url: str, size: int, total: int, work: Path) -> dict[str, float]:
    from rara.artifacts import open_store

    store = open_store(store_url)
    n = max(1, total // size)
    base_rss = _rss()
    src = work / "src.bin"
    put_s = 0.0
    refs = []
    for i in range(n):
        _write_blob(src, size, time.time_ns() + i)
        t0 = time.perf_counter()
        refs.append(store.put_file(src))
        put_s += time.perf_counter() - t0
    src.unlink()
    put_rss = _rss()
    dest = work / "dest.bin"
    t0 = time.perf_counter()
    for ref in refs:
        store.get_file(ref, dest)
    get_s = time.perf_counter() - t0
    dest.unlink()
    return {
        "put": n * size / MIB / put_s,
        "get": n * size / MIB / get_s,
        "rss": put_rss / MIB,
        "base_rss": base_rss / MIB,
        "n": n,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="1,64,1024", help="blob sizes in MiB")
    ap.add_argument("--total-mb", type=int, default=256, help="data per case (default 256)")
    ap.add_argument("--one", nargs=3, help=argparse.SUPPRESS)  # url size total, in a child
    a = ap.parse_args()
    if a.one:
        url, size, total = a.one[0], int(a.one[1]), int(a.one[2])
        with tempfile.TemporaryDirectory(prefix="rara-s3bench-") as tmp:
            print(json.dumps(_one(url, size, total, Path(tmp))))
        return

    sys.path.insert(0, str(ROOT))
    from tests.artifacts.s3_server import running, server_binary

    binary, why = server_binary()
    if binary is None:
        sys.exit(why)
    sizes = [int(s) for s in a.sizes.split(",")]
    with (
        tempfile.TemporaryDirectory(
            prefix="rara-s3bench-", dir=ROOT / ".rara" if (ROOT / ".rara").is_dir() else None
        ) as tmp,
        running(binary, Path(tmp) / "s3") as server,
    ):
        server.make_bucket("bench")
        stores = {"local": str(Path(tmp) / "local"), "s3": server.url("bench", "arts")}
        env = {**os.environ, **server.env()}
        print(
            f"{'store':<7}{'blob':>9}{'n':>4}{'put MB/s':>10}{'get MB/s':>10}"
            f"{'peak RSS MiB':>14}{'(before)':>10}",
            flush=True,
        )
        for size in sizes:
            for name, url in stores.items():
                r = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--one",
                        url,
                        str(size * MIB),
                        str(max(a.total_mb, size) * MIB),
                    ],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if r.returncode:
                    print(f"{name:<7}{size:>6} MiB  error: {r.stderr.strip()[-300:]}")
                    continue
                m = json.loads(r.stdout)
                print(
                    f"{name:<7}{size:>5} MiB{m['n']:>4}{m['put']:>10.0f}{m['get']:>10.0f}"
                    f"{m['rss']:>14.0f}{m['base_rss']:>10.0f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
