"""One logging set-up for every process (rara/logs.py): standard-library records, kopf's
included, come out as the same JSON lines as structlog's, through the redacting processor.

Real processes reading their stderr: ``configure`` changes process-wide state (the root
logger), and the operator test runs ``rara operator`` itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

SECRET = "hunter2pass"
TIMEOUT_S = 60.0  # a cold interpreter importing kopf and the kubernetes client


def json_lines(text: str) -> list[dict[str, Any]]:
    lines = [line for line in text.splitlines() if line.strip()]
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
    return parsed


SCRIPT = f"""
import logging, structlog
from rara import logs
logs.configure("info", json=True)
ref = {{"kind": "WorkflowRun", "namespace": "ml", "name": "r1", "uid": "u1"}}
logging.getLogger("kopf.objects").warning(
    "connecting to %s", "postgresql://rara:{SECRET}@db/rara",
    extra={{"k8s_ref": ref, "settings": object()}})
try:
    raise RuntimeError("password={SECRET}")
except RuntimeError:
    logging.getLogger("kopf._core.reactor").exception("handler failed")
logging.getLogger("kopf.objects").debug("below the level: dropped")
structlog.get_logger().info("native", token="{SECRET}")
"""


def test_stdlib_records_are_json_and_redacted() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stderr
    warning, error, native = json_lines(done.stderr)
    assert warning["logger"] == "kopf.objects"
    assert warning["level"] == "warning"
    assert warning["event"] == "connecting to [REDACTED]db/rara"
    assert warning["k8s_ref"]["name"] == "r1"  # kopf's object reference is kept...
    assert "settings" not in warning  # ...its other extras are not
    assert "timestamp" in warning
    assert error["level"] == "error"
    assert "RuntimeError: [REDACTED]" in error["exception"]  # the traceback, redacted
    assert native["token"] == "[REDACTED]"


async def test_operator_and_kopf_log_json_lines_redacted(tmp_path: Path) -> None:
    """``rara operator`` against an API server that is not there: kopf's own lines, which
    quote the server URL and its credentials, come out as JSON with the password masked."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [
                    {"name": "c", "cluster": {"server": f"https://kube:{SECRET}@127.0.0.1:9"}}
                ],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    env.pop("RARA_NAMESPACE", None)
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("rara")),
        "operator",
        "--namespace",
        "ml",
        # Nothing listens on port 9: the pool logs its retries, the operator keeps running.
        "--database-url",
        f"postgresql://rara:{SECRET}@127.0.0.1:9/rara",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    assert proc.stderr is not None
    seen: list[str] = []
    try:
        async with asyncio.timeout(TIMEOUT_S):
            while not any("Request attempt" in line for line in seen):
                line = (await proc.stderr.readline()).decode()
                assert line, f"operator exited early: {''.join(seen)}"
                seen.append(line)
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(TIMEOUT_S):
            _, rest = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = "".join(seen) + rest.decode()
    assert SECRET not in text
    lines = json_lines(text)
    kopf = [line for line in lines if line.get("logger", "").startswith("kopf")]
    assert any(
        "Request attempt" in line["event"] and "[REDACTED]127.0.0.1:9" in line["event"]
        for line in kopf
    )
    assert any(line["event"].startswith("Signal SIGTERM") for line in kopf)
    assert all({"event", "level", "timestamp"} <= set(line) for line in lines)
    assert proc.returncode == 0, text
