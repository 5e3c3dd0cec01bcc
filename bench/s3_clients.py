"""Which S3 client for the artifact store: 1 GiB upload/download, MB/s and peak RSS.

    python bench/s3_clients.py [--size-mb 1024] [--libs minio,obstore,boto3]

Starts the test S3 server (versitygw, ``.ci/go-tool.sh versitygw``) on 127.0.0.1 and, for each
library, uploads a file then downloads it to a file, each in a fresh process so that peak RSS
(``ru_maxrss``) is that operation's alone. Every library moves 16 MiB parts, 4 at a time
where it can. boto3 cannot be installed beside rara (botocore pins python-dateutil<3, the
pinned kubernetes client needs >=3), so run this from a separate venv holding the three:

    python3 -m venv /tmp/s3cmp && /tmp/s3cmp/bin/pip install boto3 minio obstore
    /tmp/s3cmp/bin/python bench/s3_clients.py
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
PART = 16 << 20
MB = 1 << 20


def _upload(lib: str, a: argparse.Namespace) -> None:
    if lib == "boto3":
        import boto3
        from boto3.s3.transfer import TransferConfig

        s3 = boto3.client("s3", endpoint_url=a.endpoint, region_name="us-east-1")
        s3.upload_file(
            a.file,
            a.bucket,
            lib,
            Config=TransferConfig(multipart_chunksize=PART, max_concurrency=4),
        )
    elif lib == "minio":
        from minio import Minio

        mc = Minio(
            a.endpoint.removeprefix("http://"),
            secure=False,
            region="us-east-1",
            access_key=os.environ["AWS_ACCESS_KEY_ID"],
            secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        )
        mc.fput_object(a.bucket, lib, a.file, part_size=PART, num_parallel_uploads=4)
    elif lib == "obstore":
        import obstore
        from obstore.store import S3Store

        st = S3Store(
            a.bucket, endpoint=a.endpoint, region="us-east-1", client_options={"allow_http": True}
        )
        with open(a.file, "rb") as f:
            obstore.put(st, lib, f, chunk_size=PART, max_concurrency=4)


def _download(lib: str, a: argparse.Namespace) -> None:
    if lib == "boto3":
        import boto3
        from boto3.s3.transfer import TransferConfig

        s3 = boto3.client("s3", endpoint_url=a.endpoint, region_name="us-east-1")
        s3.download_file(
            a.bucket, lib, a.out, Config=TransferConfig(multipart_chunksize=PART, max_concurrency=4)
        )
    elif lib == "minio":
        from minio import Minio

        mc = Minio(
            a.endpoint.removeprefix("http://"),
            secure=False,
            region="us-east-1",
            access_key=os.environ["AWS_ACCESS_KEY_ID"],
            secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        )
        resp = mc.get_object(a.bucket, lib)
        with open(a.out, "wb") as f:
            for chunk in resp.stream(MB):
                f.write(chunk)
        resp.close()
        resp.release_conn()
    elif lib == "obstore":
        import obstore
        from obstore.store import S3Store

        st = S3Store(
            a.bucket, endpoint=a.endpoint, region="us-east-1", client_options={"allow_http": True}
        )
        with open(a.out, "wb") as f:
            for chunk in obstore.get(st, lib).stream(min_chunk_size=MB):
                f.write(chunk)


def _one(a: argparse.Namespace) -> None:
    lib, op = a.one
    t0 = time.perf_counter()
    (_upload if op == "put" else _download)(lib, a)
    dt = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": dt, "rss": rss}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--libs", default="minio,obstore,boto3")
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--endpoint", help=argparse.SUPPRESS)
    ap.add_argument("--bucket", default="bench", help=argparse.SUPPRESS)
    ap.add_argument("--file", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        _one(a)
        return
    sys.path.insert(0, str(ROOT))
    from tests.artifacts.s3_server import running, server_binary

    binary, why = server_binary()
    if binary is None:
        sys.exit(why)
    with (
        tempfile.TemporaryDirectory(prefix="rara-s3cmp-") as tmp,
        running(binary, Path(tmp) / "s3") as server,
    ):
        server.make_bucket("bench")
        src, out = Path(tmp) / "src.bin", Path(tmp) / "out.bin"
        with open(src, "wb") as f:
            for _ in range(a.size_mb):
                f.write(os.urandom(MB))
        env = {**os.environ, **server.env()}
        print(f"{a.size_mb} MiB, versitygw on loopback; MB/s (peak RSS MiB)")
        print(f"{'library':<10}{'upload':>22}{'download':>22}")
        for lib in a.libs.split(","):
            cells = []
            for op in ("put", "get"):
                r = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--one",
                        lib,
                        op,
                        "--endpoint",
                        server.endpoint,
                        "--file",
                        str(src),
                        "--out",
                        str(out),
                    ],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if r.returncode:
                    cells.append("error: " + r.stderr.strip().splitlines()[-1][:60])
                    continue
                m = json.loads(r.stdout)
                cells.append(f"{a.size_mb / m['seconds']:.0f} ({m['rss'] / MB:.0f})")
            print(f"{lib:<10}{cells[0]:>22}{cells[1]:>22}", flush=True)
            out.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
