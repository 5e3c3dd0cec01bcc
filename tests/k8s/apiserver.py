"""A real Kubernetes API server (etcd + kube-apiserver) for tests, on loopback.

No kubelet, no controller-manager, no scheduler: objects are stored, validated, defaulted,
admitted and authorised exactly as in a cluster, but nothing reconciles them (a Deployment
just exists; a deleted Namespace stays Terminating). That is what operator tests need.

Binaries come from ``.ci/k8s-binaries.sh`` (built from pinned upstream Go modules). Lookup
order: ``RARA_KUBE_APISERVER`` / ``RARA_ETCD`` env vars, then the paths the script reports
(``.ci/k8s-binaries.sh env``), then ``PATH``. When they are missing, :func:`locate_binaries`
returns a reason that names the script; the fixture skips with it.

``RARA_K8S_READY_TIMEOUT`` (seconds, default 180) bounds start-up; ``RARA_KEEP_K8S_DIR=1``
keeps the work dir (logs, certs, kubeconfig) after the session.

``RARA_TEST_KUBECONFIG=/path/to/kubeconfig`` uses an existing cluster instead (opt-in on
purpose: a plain ``KUBECONFIG`` is never picked up, so tests cannot touch a cluster by
accident).

Security set-up (all generated per session, with the ``openssl`` CLI):
  * a throw-away CA and a serving certificate for 127.0.0.1/localhost,
  * a service-account signing key (RS256) and issuer,
  * a static token file with an admin token (user ``rara-admin``, group ``system:masters``)
    and the CA as ``--client-ca-file`` (client certificates work too),
  * ``--authorization-mode=RBAC``: anything that is not system:masters needs real RBAC.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from kubernetes import client

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / ".ci" / "k8s-binaries.sh"
BUILD_HINT = (
    f"run `{BUILD_SCRIPT.relative_to(REPO_ROOT)}` "
    "(builds etcd + kube-apiserver from the Go module proxy)"
)

ADMIN_USER = "rara-admin"
ADMIN_GROUP = "system:masters"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_CIDR = "10.96.0.0/16"


class KubeUnavailable(RuntimeError):
    """The binaries (or openssl) are missing: tests should skip, with str(self) as reason."""


class KubeStartError(RuntimeError):
    """A control-plane process failed to start or to become ready."""


@dataclass(frozen=True)
class Binaries:
    kube_apiserver: Path
    etcd: Path


@dataclass
class KubeAPI:
    """Connection details for a running (or external) API server."""

    kubeconfig: Path
    server: str
    external: bool
    token: str | None = None
    ca_file: Path | None = None
    workdir: Path | None = None
    logs: dict[str, Path] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        """Environment for subprocesses (kubectl, the operator) pointing at this server."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}


# --------------------------------------------------------------------------- binaries


def _script_paths() -> dict[str, str]:
    if not BUILD_SCRIPT.exists() or shutil.which("bash") is None:
        return {}
    try:
        out = subprocess.run(
            ["bash", str(BUILD_SCRIPT), "env"],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return {}
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def locate_binaries() -> Binaries:
    """Find kube-apiserver and etcd, or raise KubeUnavailable naming the build script."""
    from_script = _script_paths()
    found: dict[str, Path] = {}
    looked: list[str] = []
    for name, env_var, key in (
        ("kube-apiserver", "RARA_KUBE_APISERVER", "KUBE_APISERVER"),
        ("etcd", "RARA_ETCD", "ETCD"),
    ):
        candidates = [os.environ.get(env_var), from_script.get(key), shutil.which(name)]
        for cand in candidates:
            if cand and os.access(cand, os.X_OK) and Path(cand).is_file():
                found[name] = Path(cand)
                break
        else:
            looked.append(f"{name} (${env_var}, {from_script.get(key, '<script cache>')}, $PATH)")
    if looked:
        raise KubeUnavailable(
            f"missing {'; '.join(looked)}: {BUILD_HINT}, "
            "or set RARA_TEST_KUBECONFIG to use an existing cluster"
        )
    if shutil.which("openssl") is None:
        raise KubeUnavailable("the openssl CLI is needed to generate test certificates")
    return Binaries(kube_apiserver=found["kube-apiserver"], etcd=found["etcd"])


# --------------------------------------------------------------------------- helpers


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    if proc.returncode != 0:
        raise KubeStartError(f"openssl {' '.join(args)} failed: {proc.stderr.strip()}")


def generate_pki(pki: Path) -> None:
    """CA, serving cert (127.0.0.1/localhost), admin client cert, SA signing key."""
    pki.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
        "-subj", "/CN=rara-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=pki,
    )  # fmt: skip
    leaves = {
        "apiserver": (
            "/CN=kube-apiserver",
            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,"
            "DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.96.0.1\n"
            "extendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n",
        ),
        "admin": (
            f"/O={ADMIN_GROUP}/CN={ADMIN_USER}",
            "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n",
        ),
    }
    for name, (subj, ext) in leaves.items():
        (pki / f"{name}.ext").write_text(ext)
        _openssl("req", "-new", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", subj, cwd=pki)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext",
                 "-out", f"{name}.crt", cwd=pki)  # fmt: skip
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
             "-out", "sa.key", cwd=pki)  # fmt: skip
    _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
    for key in pki.glob("*.key"):
        key.chmod(0o600)


def write_kubeconfig(
    path: Path,
    server: str,
    ca_file: Path,
    *,
    token: str | None = None,
    client_cert: Path | None = None,
    client_key: Path | None = None,
    name: str = "rara-test",
) -> Path:
    user: dict[str, str] = {}
    if token is not None:
        user["token"] = token
    if client_cert is not None and client_key is not None:
        user["client-certificate"] = str(client_cert)
        user["client-key"] = str(client_key)
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": name, "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
    return path


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux: SIGKILL the child if the test process dies (no orphans after `kill -9 pytest`).

    SIGKILL, not SIGTERM: the data is throw-away, and a kube-apiserver whose etcd vanished
    first spends a long time in graceful termination."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "<no log>"


class _Proc:
    def __init__(self, name: str, argv: list[str], log: Path) -> None:
        self.name, self.log = name, log
        self._fh = log.open("wb")
        self.popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._fh,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )

    def check_alive(self) -> None:
        code = self.popen.poll()
        if code is not None:
            raise KubeStartError(
                f"{self.name} exited with {code} during start-up; log {self.log}:\n"
                f"{_tail(self.log)}"
            )

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, wait up to `grace` seconds, then SIGKILL."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)
        self._fh.close()


def _wait_until(
    what: str, probe: object, deadline: float, procs: list[_Proc], interval: float = 0.1
) -> None:
    """Poll `probe()` (truthy = ready) until `deadline` (monotonic); fail fast on a dead proc."""
    assert callable(probe)
    last_error = ""
    while True:
        for p in procs:
            p.check_alive()
        try:
            if probe():
                return
        except (OSError, urllib.error.URLError, ValueError) as exc:
            last_error = f"{type(exc).__name__}: {exc}"
        if time.monotonic() >= deadline:
            logs = "\n".join(f"--- {p.name} ({p.log}):\n{_tail(p.log, 20)}" for p in procs)
            raise KubeStartError(f"{what} not ready before deadline ({last_error})\n{logs}")
        time.sleep(interval)
        interval = min(interval * 1.5, 1.0)


def _http_ok(url: str, *, context: ssl.SSLContext | None = None, token: str | None = None) -> str:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=5, context=context) as resp:
            return str(resp.read().decode("utf-8", "replace")) if resp.status == 200 else ""
    except urllib.error.HTTPError as exc:  # e.g. 500 from /readyz while hooks run
        exc.close()
        return ""


# --------------------------------------------------------------------------- the server

WORKDIR_PREFIX = "rara-kube-"


def _sweep_stale_workdirs() -> None:
    """Remove work dirs left by a test process that was killed (its owner pid is gone)."""
    for d in Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*"):
        try:
            pid = int((d / "owner.pid").read_text())
        except (OSError, ValueError):
            continue  # not ours, or still being created
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except PermissionError:
            continue


@contextlib.contextmanager
def local_apiserver(
    binaries: Binaries | None = None,
    *,
    ready_timeout: float | None = None,
    workdir: Path | None = None,
    keep_workdir: bool | None = None,
    extra_apiserver_args: list[str] | None = None,
    attempts: int = 3,
) -> Iterator[KubeAPI]:
    """Start etcd + kube-apiserver on free loopback ports; yield a KubeAPI; tear down.

    Ports are chosen by binding to port 0 and releasing; if another process grabs one in
    between, start-up is retried (up to `attempts` times) with fresh ports.
    """
    binaries = binaries or locate_binaries()
    if ready_timeout is None:  # generous: a loaded 2-core CI machine is slow to start it
        ready_timeout = float(os.environ.get("RARA_K8S_READY_TIMEOUT", "180"))
    if keep_workdir is None:
        keep_workdir = bool(os.environ.get("RARA_KEEP_K8S_DIR"))
    if workdir is None:
        _sweep_stale_workdirs()
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
    (root / "owner.pid").write_text(str(os.getpid()))
    pki = root / "pki"
    generate_pki(pki)
    token = secrets.token_hex(24)
    tokens = pki / "tokens.csv"
    tokens.write_text(f'{token},{ADMIN_USER},{ADMIN_USER},"{ADMIN_GROUP}"\n')
    tokens.chmod(0o600)

    procs: list[_Proc] = []
    try:
        for attempt in range(1, attempts + 1):
            try:
                api = _start(binaries, root, pki, token, ready_timeout, extra_apiserver_args, procs)
                break
            except KubeStartError as exc:
                port_clash = "address already in use" in str(exc).lower()
                for p in reversed(procs):
                    p.stop(grace=5)
                procs.clear()
                if not port_clash or attempt == attempts:
                    raise
        yield api
    finally:
        for p in reversed(procs):  # apiserver first, then etcd
            p.stop()
        if not keep_workdir:
            shutil.rmtree(root, ignore_errors=True)


def _start(
    binaries: Binaries,
    root: Path,
    pki: Path,
    token: str,
    ready_timeout: float,
    extra_args: list[str] | None,
    procs: list[_Proc],
) -> KubeAPI:
    deadline = time.monotonic() + ready_timeout
    etcd_client, etcd_peer, secure_port = free_port(), free_port(), free_port()
    etcd_url = f"http://127.0.0.1:{etcd_client}"
    data_dir = root / "etcd"
    shutil.rmtree(data_dir, ignore_errors=True)
    etcd = _Proc(
        "etcd",
        [
            str(binaries.etcd),
            "--name=rara-test",
            f"--data-dir={data_dir}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-cluster=rara-test=http://127.0.0.1:{etcd_peer}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync",  # test data only: much faster on slow disks
            "--log-level=warn",
        ],
        root / "etcd.log",
    )
    procs.append(etcd)
    _wait_until(
        "etcd",
        lambda: json.loads(_http_ok(f"{etcd_url}/health") or "{}").get("health") == "true",
        deadline,
        [etcd],
    )

    server = f"https://127.0.0.1:{secure_port}"
    apiserver = _Proc(
        "kube-apiserver",
        [
            str(binaries.kube_apiserver),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # the `kubernetes` Service endpoints would point at loopback, which v1.37 refuses
            "--endpoint-reconciler-type=none",
            f"--secure-port={secure_port}",
            f"--cert-dir={root / 'apiserver-certs'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--profiling=false",
            "--v=1",
            *(extra_args or []),
        ],
        root / "kube-apiserver.log",
    )
    procs.append(apiserver)
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    _wait_until(
        "kube-apiserver /readyz",
        lambda: _http_ok(f"{server}/readyz", context=ctx, token=token) == "ok",
        deadline,
        [etcd, apiserver],
    )
    kubeconfig = write_kubeconfig(
        root / "kubeconfig",
        server,
        pki / "ca.crt",
        token=token,
    )
    write_kubeconfig(  # same admin identity via client certificate, for tools that want it
        root / "kubeconfig-cert",
        server,
        pki / "ca.crt",
        client_cert=pki / "admin.crt",
        client_key=pki / "admin.key",
    )
    return KubeAPI(
        kubeconfig=kubeconfig,
        server=server,
        external=False,
        token=token,
        ca_file=pki / "ca.crt",
        workdir=root,
        logs={"etcd": etcd.log, "kube-apiserver": apiserver.log},
    )


@contextlib.contextmanager
def kube_api_from_env() -> Iterator[KubeAPI]:
    """RARA_TEST_KUBECONFIG -> that cluster; else a local etcd + kube-apiserver.

    Raises KubeUnavailable (callers skip) when neither is possible.
    """
    external = os.environ.get("RARA_TEST_KUBECONFIG")
    if external:
        path = Path(external).expanduser()
        if not path.is_file():
            raise KubeUnavailable(f"RARA_TEST_KUBECONFIG={external} is not a file")
        doc = yaml.safe_load(path.read_text()) or {}
        current = doc.get("current-context")
        ctx = next((c["context"] for c in doc.get("contexts", []) if c["name"] == current), {})
        cluster = next(
            (c["cluster"] for c in doc.get("clusters", []) if c["name"] == ctx.get("cluster")),
            {},
        )
        yield KubeAPI(kubeconfig=path, server=str(cluster.get("server", "")), external=True)
        return
    with local_apiserver() as api:
        yield api


@dataclass
class KubeFixture:
    """What ``kube_api`` yields: the kubeconfig path and a configured ApiClient."""

    kubeconfig: Path
    api_client: client.ApiClient
    info: KubeAPI

    @property
    def external(self) -> bool:
        return self.info.external
