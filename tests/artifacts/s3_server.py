"""A real S3 server (versitygw, posix backend) on 127.0.0.1 for tests and benchmarks.

The binary comes from ``.ci/go-tool.sh versitygw`` (built once from its Go module, cached by
version).
:func:`server_binary` returns None with the reason when it cannot be had, so tests skip with
that reason instead of failing on a machine without Go.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from minio import Minio

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "go-tool.sh"
REGION = "us-east-1"


def server_binary(build: bool = True) -> tuple[Path | None, str]:
    """(path, "") of the cached server binary, building it if asked; (None, why) if not."""
    if override := os.environ.get("RARA_S3_SERVER_BIN"):
        return Path(override), ""
    mode = "build" if build else "check"
    try:
        out = subprocess.run(
            [str(SCRIPT), "versitygw", mode], capture_output=True, text=True, timeout=900
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"cannot build the S3 server ({SCRIPT.name}): {exc}"
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
        return None, f"cannot build the S3 server ({SCRIPT.name}): {' | '.join(tail)}"
    if mode == "check":
        return None, "S3 server not built"
    return Path(out.stdout.strip().splitlines()[-1]), ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class S3Server:
    """One versitygw process serving ``data_dir`` on ``127.0.0.1:port``; restartable."""

    binary: Path
    data_dir: Path
    port: int = field(default_factory=free_port)
    access_key: str = field(default_factory=lambda: "rara" + secrets.token_hex(4))
    secret_key: str = field(default_factory=lambda: secrets.token_hex(16))
    proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, bucket: str, prefix: str = "", **query: str) -> str:
        q = "&".join(
            f"{k}={v}" for k, v in {"endpoint": self.endpoint, "region": REGION, **query}.items()
        )
        return f"s3://{bucket}/{prefix}?{q}"

    def env(self) -> dict[str, str]:
        """Credentials by reference, the way a pod gets them: environment variables."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}

    def start(self, timeout: float = 30.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": os.environ.get("PATH", ""),
            "ROOT_ACCESS_KEY_ID": self.access_key,
            "ROOT_SECRET_ACCESS_KEY": self.secret_key,
        }
        self.proc = subprocess.Popen(
            [
                str(self.binary),
                "--port",
                f"127.0.0.1:{self.port}",
                "--region",
                REGION,
                "--quiet",
                "posix",
                str(self.data_dir),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + timeout
        while True:  # until it accepts connections (or died, or the deadline passed)
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise RuntimeError(f"S3 server exited with {self.proc.returncode}: {err[-2000:]}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5),
            ):
                return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"S3 server not listening on {self.port} after {timeout}s")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL, as a crash or an evicted pod: no graceful end for requests in flight."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._close()

    def _close(self) -> None:
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()

    def client(self) -> Minio:
        """A plain client of this server, for tests to look into buckets past the store."""
        from minio import Minio

        return Minio(
            f"127.0.0.1:{self.port}", self.access_key, self.secret_key, secure=False, region=REGION
        )

    def make_bucket(self, name: str) -> None:
        """Create a bucket through the S3 API (the posix backend keeps its metadata)."""
        self.client().make_bucket(name)

    def objects(self, bucket: str, prefix: str = "") -> dict[str, bytes]:
        """Every object under ``prefix``, by key, as the server holds it."""
        client = self.client()
        out: dict[str, bytes] = {}
        for obj in client.list_objects(bucket, prefix, recursive=True):
            name = obj.object_name or ""
            resp = client.get_object(bucket, name)
            try:
                out[name] = resp.read()
            finally:
                resp.close()
                resp.release_conn()
        return out


@contextlib.contextmanager
def running(binary: Path, data_dir: Path) -> Iterator[S3Server]:
    server = S3Server(binary, data_dir)
    server.start()
    try:
        yield server
    finally:
        server.stop()
