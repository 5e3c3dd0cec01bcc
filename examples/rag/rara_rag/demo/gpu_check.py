"""``make gpu-check``: the adaptation step on a CUDA GPU, through the executor service.

Starts an executor (``rara.executor.main --plugins rara_rag.demo.plugins``), puts the stdlib
corpus's passages and BM25 index in its artifact store, and sends it the ``adapt.lora@1`` job
twice over gRPC — 4-bit QLoRA (``quantize: always``, bitsandbytes NF4) and plain LoRA
(``quantize: never``) — as the worker would. Checks that each ran on CUDA with GPU memory
allocated, that the QLoRA one's base linears were 4-bit (bitsandbytes ``Linear4bit``) and the
LoRA one's were not; prints steps/s, peak GPU memory and the quality table.

Without a CUDA GPU it says so and exits 0 having run nothing: there is nothing to check.
Exit 1 when a check fails.

Its artifacts go to a scratch directory, never ``RARA_ARTIFACTS``: this checks the GPU path
(device, quantization, speed, quality) on a fresh machine within minutes, so it must not need
a store's credentials nor leave two model checkpoints in a shared bucket. The S3 store and
checkpoint resume from it are what ``make demo`` with ``RARA_ARTIFACTS=s3://…`` and the kind
suite check.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CAPABILITY = "adapt.lora@1"
MODES = (("QLoRA 4-bit", "always"), ("LoRA", "never"))


def gpu() -> str | None:
    """The CUDA device's name, or None (with the reason printed) when there is none."""
    try:
        import torch
    except ImportError:
        print("gpu-check: no GPU check possible: torch is not installed (make setup)")
        return None
    smi = shutil.which("nvidia-smi")
    if not torch.cuda.is_available():
        why = f"torch {torch.__version__} sees no CUDA device"
        why += "" if smi else "; no nvidia-smi on PATH"
        print(f"gpu-check: no GPU here ({why}): nothing was run.")
        return None
    return str(torch.cuda.get_device_name(0))


async def _run_jobs(
    endpoint: str, token: str, inputs: dict[str, Any], payload: dict[str, Any]
) -> list[dict[str, Any]]:
    from rara.executor.client import ExecutorClient
    from rara.executor.wire import make_job

    out: list[dict[str, Any]] = []
    async with ExecutorClient(endpoint, token=token) as client:
        deadline = time.monotonic() + 120
        while True:
            try:
                caps = await client.get_capabilities(rpc_timeout=5)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
        served = {f"{c.name}@{c.major}" for c in caps.capabilities}
        if CAPABILITY not in served:
            raise SystemExit(f"gpu-check: the executor does not serve {CAPABILITY}: {served}")
        for label, quantize in MODES:
            job = make_job(
                capability=CAPABILITY,
                idempotency_key=f"gpu-check:{quantize}:{secrets.token_hex(4)}",
                step_key="adapt",
                payload={**payload, "quantize": quantize},
                inputs=inputs,
            )
            started = time.monotonic()
            last: Any = None
            async for event in client.execute(job):
                kind = event.WhichOneof("event")
                if kind == "progress" and event.progress.message.startswith("step"):
                    print(f"  {label}: {event.progress.message}", end="\r", flush=True)
                last = event
            print()
            end: str = last.WhichOneof("event") if last is not None else "nothing"
            entry: dict[str, Any] = {"mode": label, "wall_s": time.monotonic() - started}
            if end == "succeeded":
                entry["result"] = json.loads(last.succeeded.result_json or b"null")
            else:
                entry["error"] = str(last.failed.error.message if end == "failed" else end)
            out.append(entry)
    return out


def _fmt(m: dict[str, float], key: str, signed: bool = False) -> str:
    spec = "+.3f" if signed else ".3f"
    if key not in m:
        return "-"
    lo, hi = m.get(f"{key}_lo"), m.get(f"{key}_hi")
    ci = f" [{lo:{spec}}, {hi:{spec}}]" if lo is not None and hi is not None else ""
    return f"{m[key]:{spec}}{ci}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rara_rag.demo.gpu_check", description=__doc__)
    ap.add_argument("--train", type=int, default=512, help="training pairs")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--corpus", default="stdlib")
    args = ap.parse_args(argv)
    name = gpu()
    if name is None:
        return 0
    import torch

    from rara.artifacts.store import LocalArtifactStore
    from rara_rag import corpus, index

    print(f"gpu-check: {name}, torch {torch.__version__} (CUDA {torch.version.cuda})")
    try:
        import bitsandbytes  # type: ignore[import-not-found,unused-ignore]

        print(f"gpu-check: bitsandbytes {bitsandbytes.__version__}")
    except ImportError:
        print("gpu-check: bitsandbytes is missing (pip install -e 'examples/rag[gpu]')")
        return 1
    home = Path(tempfile.mkdtemp(prefix="rara-gpu-check-"))
    store = LocalArtifactStore(home / "artifacts")
    t = time.monotonic()
    passages = corpus.clean(corpus.collect(corpus=args.corpus))
    inputs = {
        "passages.jsonl": store.put_bytes(corpus.passages_to_jsonl(passages)),
        "index.bm25": store.put_bytes(index.build(passages).to_bytes()),
    }
    print(f"gpu-check: {len(passages)} passages indexed in {time.monotonic() - t:.1f}s")
    token = home / "token"
    token.write_text(secrets.token_urlsafe(32))
    token.chmod(0o600)
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        endpoint = f"127.0.0.1:{s.getsockname()[1]}"
    log = open(home / "executor.log", "wb")  # noqa: SIM115 - lives as long as the executor
    executor = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rara.executor.main",
            "--listen",
            endpoint,
            "--token-file",
            str(token),
            "--plugins",
            "rara_rag.demo.plugins",
            "--artifact-root",
            str(home / "artifacts"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    payload = {
        "seed": 0,
        "train": args.train,
        "epochs": args.epochs,
        "batch_size": 32,
        "checkpoint_every": 8,
        "threads": 0,
    }
    try:
        results = asyncio.run(_run_jobs(endpoint, token.read_text(), inputs, payload))
    finally:
        executor.terminate()
        executor.wait(30)
        log.close()
    return report(results, home)


def report(results: list[dict[str, Any]], home: Path) -> int:
    ok = True
    print()
    print(
        f"{'mode':12} {'device':6} {'4-bit linears':>13} {'LoRA layers':>11} {'steps':>5} "
        f"{'steps/s':>7} {'peak GPU MiB':>12} {'wall s':>6}"
    )
    for r in results:
        if "error" in r:
            print(f"{r['mode']:12} FAILED: {r['error']}  (executor log: {home / 'executor.log'})")
            ok = False
            continue
        res, m = r["result"], r["result"]["metrics"]
        print(
            f"{r['mode']:12} {res['device']:6} {int(m.get('linear4bit_layers', 0)):>13} "
            f"{int(m.get('lora_layers', 0)):>11} {res['steps']:>5} "
            f"{m.get('steps_per_s', float('nan')):>7.2f} "
            f"{m.get('gpu/peak_memory_mib', 0.0):>12.0f} {r['wall_s']:>6.1f}"
        )
        want_4bit = r["mode"].startswith("QLoRA")
        checks = {
            "ran on cuda": res["device"] == "cuda",
            "GPU memory allocated": m.get("gpu/peak_memory_mib", 0.0) > 0,
            "quantized as asked": bool(res["quantized"]) == want_4bit,
            "4-bit linears as asked": (m.get("linear4bit_layers", 0) > 0) == want_4bit,
            "LoRA layers present": m.get("lora_layers", 0) > 0,
        }
        for what, held in checks.items():
            if not held:
                print(f"  CHECK FAILED: {what}")
                ok = False
    print()
    rows = (
        ("before", "MiniLM before"),
        ("after", "MiniLM after"),
        ("hybrid", "hybrid (RRF)"),
        ("diff", "after - before"),
    )
    for r in results:
        if "error" in r:
            continue
        m = r["result"]["metrics"]
        print(
            f"{r['mode']}: {int(m.get('eval_queries', 0))} held-out queries, "
            "mean [95% bootstrap interval]"
        )
        print(f"  {'retriever':16} {'recall@1':>22} {'recall@10':>22} {'MRR@10':>22}")
        for prefix, label in rows:
            row = {k.split("/", 1)[1]: v for k, v in m.items() if k.startswith(prefix + "/")}
            cells = [_fmt(row, k, prefix == "diff") for k in ("recall@1", "recall@10", "mrr@10")]
            print(f"  {label:16} " + " ".join(f"{c:>22}" for c in cells))
    print(f"gpu-check: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
