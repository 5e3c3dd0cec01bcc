"""The Helm chart: lint, render, and validate what it renders.

helm comes from ``.ci/go-tool.sh`` (built once from its Go module into ~/.cache/rara/bin); without
Go or the module proxy these tests skip and say so. Rendered manifests are validated against
the Kubernetes 1.37 OpenAPI schemas bundled in kubernetes-validate (strict: unknown fields
fail); the API server's own server-side dry run of the same manifests is in
tests/k8s/test_operator_chart.py.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "rara"
GO_TOOL = ROOT / ".ci" / "go-tool.sh"
KUBE_VERSION = "1.37.0"
BASE = ["--set", "database.url=postgresql://rara@db:5432/rara"]


@pytest.fixture(scope="session")
def helm() -> Path:
    started = time.monotonic()
    try:
        done = subprocess.run(
            ["bash", str(GO_TOOL), "helm"],
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("building helm with .ci/go-tool.sh took over 30 minutes")
    if done.returncode != 0:
        pytest.skip(
            f"helm could not be built by .ci/go-tool.sh (needs go and the Go module "
            f"proxy): {done.stderr.strip()[-500:]}"
        )
    path = Path(done.stdout.strip().splitlines()[-1])
    print(f"\n[measure] helm ready in {time.monotonic() - started:.1f}s ({path.name})")
    return path


def render(helm: Path, *args: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [
            str(helm),
            "template",
            "rara",
            str(CHART),
            "--namespace",
            "ml",
            "--include-crds",
            "--kube-version",
            KUBE_VERSION,
            *BASE,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def refused(helm: Path, *args: str, base: tuple[str, ...] = tuple(BASE)) -> str:
    """``helm template`` with ``args`` fails; its stderr."""
    done = subprocess.run(
        [str(helm), "template", "rara", str(CHART), "--kube-version", KUBE_VERSION, *base, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0, args
    return done.stderr


def settings_of(monkeypatch: pytest.MonkeyPatch, container: dict[str, Any], cls: Any) -> Any:
    """What ``cls`` (a settings class) loads from the container's literal env."""
    with monkeypatch.context() as env:
        for entry in container["env"]:
            if "value" in entry:
                env.setenv(entry["name"], entry["value"])
        return cls.load()


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in by_kind(docs, kind) if d["metadata"]["name"] == name]
    return doc


VARIANTS = {
    "defaults": [],
    "existing secrets, cluster-wide": [
        "--set",
        "database.existingSecret=pg",
        "--set",
        "executorToken.existingSecret=tok",
        "--set",
        "operator.clusterWide=true",
    ],
    "no executor, two pools": [
        "--set",
        "executor.enabled=false",
        "--set-json",
        'pools=[{"name":"cpu","capabilities":["a.b@1"]},'
        '{"name":"io","capabilities":["c@2"],"maxReplicas":0}]',
    ],
}


@pytest.fixture(scope="session", params=list(VARIANTS), ids=list(VARIANTS))
def rendered(request: pytest.FixtureRequest, helm: Path) -> list[dict[str, Any]]:
    return render(helm, *VARIANTS[request.param])


def test_lint(helm: Path) -> None:
    done = subprocess.run(
        [str(helm), "lint", "--strict", str(CHART), *BASE],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_values_schema_refuses_typos(helm: Path) -> None:
    assert "maxReplica" in refused(helm, "--set", "pools[0].maxReplica=3")


def test_database_is_required(helm: Path) -> None:
    assert "database.existingSecret" in refused(helm, base=())


def test_manifests_match_kubernetes_schemas(rendered: list[dict[str, Any]]) -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed")
    for doc in rendered:
        if doc["apiVersion"].startswith(("rara.dev/", "kopf.dev/")):
            continue  # custom kinds: checked against the CRDs by the API server test
        try:
            kv.validate(doc, KUBE_VERSION, strict=True)
        except kv.ValidationError as exc:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: {exc}")


def test_crds_are_the_top_level_ones(rendered: list[dict[str, Any]]) -> None:
    """The chart installs exactly crds/: charts/rara/crds is its copy (charts/crds.sh; `make
    lint` fails when the copy is stale)."""
    crds = {d["metadata"]["name"]: d for d in by_kind(rendered, "CustomResourceDefinition")}
    expected = {p.stem: yaml.safe_load(p.read_text()) for p in (ROOT / "crds").glob("*.yaml")}
    assert crds == {d["metadata"]["name"]: d for d in expected.values()}


def test_rbac_is_least_privilege(rendered: list[dict[str, Any]]) -> None:
    roles = by_kind(rendered, "Role") + by_kind(rendered, "ClusterRole")
    (role,) = roles
    rules = {
        (
            tuple(r["apiGroups"]),
            tuple(r["resources"]),
            *([tuple(r["resourceNames"])] if "resourceNames" in r else []),
        ): set(r["verbs"])
        for r in role["rules"]
    }
    peerings = "kopfpeerings" if role["kind"] == "Role" else "clusterkopfpeerings"
    assert rules == {
        (
            ("rara.dev",),
            (
                "workflowdefinitions",
                "workflowruns",
                "workflowschedules",
                "workflowtriggers",
                "workerpools",
            ),
        ): {
            "get",
            "list",
            "watch",
            "patch",
        },
        (
            ("rara.dev",),
            (
                "workflowdefinitions/status",
                "workflowruns/status",
                "workflowschedules/status",
                "workflowtriggers/status",
                "workerpools/status",
            ),
        ): {"get", "patch"},
        (("apps",), ("deployments/scale",)): {"get", "patch"},
        (("",), ("events",)): {"create"},
        (("events.k8s.io",), ("events",)): {"create"},
        # kopf peering: watch the peering objects, renew its entry in its own; no create.
        (("kopf.dev",), (peerings,)): {"list", "watch"},
        (("kopf.dev",), (peerings,), ("rara-operator",)): {"get", "patch"},
    }
    if role["kind"] == "Role":
        assert role["metadata"]["namespace"] == "ml"


def test_pools_are_scaled_by_workerpools(rendered: list[dict[str, Any]]) -> None:
    deployments = {d["metadata"]["name"]: d for d in by_kind(rendered, "Deployment")}
    pools = by_kind(rendered, "WorkerPool")
    assert pools
    for pool in pools:
        target = deployments[pool["spec"]["deploymentName"]]
        # The operator owns replicas: a helm upgrade must not reset them.
        assert "replicas" not in target["spec"]
        pdb = named(rendered, "PodDisruptionBudget", pool["metadata"]["name"])
        assert pdb["spec"]["selector"]["matchLabels"] == target["spec"]["selector"]["matchLabels"]
        assert "maxUnavailable" in pdb["spec"]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def test_pods_outlive_the_workers_shutdown_grace(rendered: list[dict[str, Any]]) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    grace = values["worker"]["shutdownGraceSeconds"]
    for dep in by_kind(rendered, "Deployment"):
        pod = dep["spec"]["template"]["spec"]
        names = {c["name"] for c in pod["containers"]}
        if "worker" not in names:
            continue
        assert pod["terminationGracePeriodSeconds"] > grace
        for container in pod["containers"]:
            assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
            assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
            env = env_of(container)
            if container["name"] == "executor":  # its grace: the same value
                assert env["RARA_EXECUTOR_GRACE"]["value"] == str(grace)
                continue
            assert env["RARA_WORKER_SHUTDOWN_GRACE_SECONDS"]["value"] == str(grace)
        assert pod["securityContext"]["runAsNonRoot"] is True


# The env prefix each container's process reads its settings under (rara/settings.py).
PREFIX = {
    "worker": "RARA_WORKER_",
    "executor": "RARA_EXECUTOR_",
    "operator": "RARA_OPERATOR_",
    "migrate": "",
}


def test_every_process_takes_its_settings_from_its_env(rendered: list[dict[str, Any]]) -> None:
    """One way for all three: no flags, only the process's own RARA_<PROCESS>_* variables
    (the pod's name aside), each naming a real setting; `migrate` is a command, not a process."""
    from rara.executor.settings import ExecutorSettings
    from rara.operator.settings import OperatorSettings
    from rara.worker.settings import WorkerSettings

    fields = {
        "worker": WorkerSettings.model_fields,
        "executor": ExecutorSettings.model_fields,
        "operator": OperatorSettings.model_fields,
    }
    workloads = by_kind(rendered, "Deployment") + by_kind(rendered, "Job")
    seen = set()
    for workload in workloads:
        for container in workload["spec"]["template"]["spec"]["containers"]:
            name = container["name"]
            assert container["args"] == [name], workload["metadata"]["name"]
            if name == "migrate":
                continue
            seen.add(name)
            for var in set(env_of(container)) - {"POD_NAME", "POD_ID"}:  # POD_ID: kopf's
                assert var.startswith(PREFIX[name]), (name, var)
                assert var.removeprefix(PREFIX[name]).lower() in fields[name], (name, var)
    assert seen >= {"worker", "operator"}


def test_secrets_are_passed_by_reference(rendered: list[dict[str, Any]]) -> None:
    """The database URL from its Secret (under the reader's own name), tokens as files."""
    workloads = by_kind(rendered, "Deployment") + by_kind(rendered, "Job")
    for workload in workloads:
        for container in workload["spec"]["template"]["spec"]["containers"]:
            env = env_of(container)
            for name, entry in env.items():  # never a literal URL or token
                if name.endswith("DATABASE_URL"):
                    assert "secretKeyRef" in entry["valueFrom"], (workload["metadata"], name)
                assert "TOKEN" not in name or name.endswith("_TOKEN_FILE"), name
            if container["name"] == "executor":
                continue  # executors never touch the database
            var = (
                f"{PREFIX[container['name']]}DATABASE_URL"
                if container["name"] != "migrate"
                else "DATABASE_URL"
            )
            assert "secretKeyRef" in env[var]["valueFrom"], workload["metadata"]


def test_migration_job_is_a_hook_and_its_secret_comes_first(helm: Path) -> None:
    docs = render(helm)
    job = named(docs, "Job", "rara-migrate")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["migrate"]
    secret = named(docs, "Secret", "rara-database")
    assert int(secret["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
        job["metadata"]["annotations"]["helm.sh/hook-weight"]
    )


@pytest.mark.parametrize(
    ("value", "args"),
    [
        (None, ["migrate"]),  # rara migrate's own: on for a new database, kept on upgrade
        ("true", ["migrate", "--isolation", "on"]),
        ("false", ["migrate", "--isolation", "off"]),
    ],
)
def test_namespace_isolation_is_set_by_the_migration_job(
    helm: Path, value: str | None, args: list[str]
) -> None:
    docs = render(helm, *(["--set", f"namespaces.isolation={value}"] if value else []))
    job = named(docs, "Job", "rara-migrate")
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == args


def test_namespace_isolation_is_a_boolean(helm: Path) -> None:
    done = subprocess.run(
        [str(helm), "template", "rara", str(CHART), *BASE, "--set", "namespaces.isolation=yes"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "isolation" in done.stderr


def test_gpu_executor(helm: Path) -> None:
    docs = render(helm)
    dep = named(docs, "Deployment", "rara-executor-gpu")
    pod = dep["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    executor, worker = env_of(containers["executor"]), env_of(containers["worker"])
    assert containers["executor"]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert pod["nodeSelector"]
    token = "/var/run/rara/executor/token"
    assert executor["RARA_EXECUTOR_TOKEN_FILE"]["value"] == token
    # Its token travels without TLS: so only on loopback, where the worker beside it calls.
    assert executor["RARA_EXECUTOR_LISTEN"]["value"] == "127.0.0.1:50051"
    assert executor["RARA_EXECUTOR_PLUGINS"]["value"] == "rara_rag.demo.plugins"
    assert worker["RARA_WORKER_EXECUTOR_TOKEN_FILE"]["value"] == token
    assert worker["RARA_WORKER_EXECUTOR_ENDPOINTS"]["value"] == "127.0.0.1:50051"
    # Two processes in one pod: the worker's metrics port is the next one.
    assert (
        int(worker["RARA_WORKER_METRICS_PORT"]["value"])
        == int(executor["RARA_EXECUTOR_METRICS_PORT"]["value"]) + 1
    )
    (volume,) = [v for v in pod["volumes"] if v["name"] == "executor-token"]
    assert volume["secret"]["secretName"] == "rara-executor-token"


def test_rendered_env_loads_as_settings(helm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the chart writes is what the settings classes accept (types, names, lists)."""
    from rara.executor import auth
    from rara.executor.settings import ExecutorSettings
    from rara.operator.peering import Peering
    from rara.operator.settings import OperatorSettings
    from rara.worker.settings import WorkerSettings

    docs = render(helm)
    classes = {"worker": WorkerSettings, "executor": ExecutorSettings, "operator": OperatorSettings}
    loaded = {
        (dep["metadata"]["name"], container["name"]): settings_of(
            monkeypatch, container, classes[container["name"]]
        )
        for dep in by_kind(docs, "Deployment")
        for container in dep["spec"]["template"]["spec"]["containers"]
    }
    operator = loaded["rara-operator", "operator"]
    assert isinstance(operator, OperatorSettings)
    assert operator.served_namespaces() == ("ml",)
    assert operator.liveness == "http://0.0.0.0:8080/healthz"
    assert operator.peering() == Peering("rara-operator", None, 15)
    executor = loaded["rara-executor-gpu", "executor"]
    assert isinstance(executor, ExecutorSettings)
    assert executor.plugins == ["rara_rag.demo.plugins"]
    assert executor.grace == 60
    # It starts: a token without TLS is refused on any address but loopback.
    auth.check(auth.AuthConfig(token="t"), executor.listen)
    worker = loaded["rara-worker-cpu", "worker"]
    assert isinstance(worker, WorkerSettings)
    assert worker.handlers == ["rara_rag.demo.handlers"]
    assert worker.metrics_port == 9100


def test_a_pool_sets_its_workers_settings(helm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rara.worker.settings import WorkerSettings

    docs = render(
        helm,
        "--set-json",
        'pools=[{"name":"shared","capabilities":["a.b@1"],'
        '"settings":{"concurrency":16,"held_back_slots":1,"capabilities":["a.b@1"]}}]',
    )
    [container] = named(docs, "Deployment", "rara-worker-shared")["spec"]["template"]["spec"][
        "containers"
    ]
    worker = settings_of(monkeypatch, container, WorkerSettings)
    assert (worker.concurrency, worker.held_back_slots) == (16, 1)
    assert worker.capabilities == ["a.b@1"]
    assert worker.handlers == ["rara_rag.demo.handlers"]  # the chart's own settings stay


def test_a_pool_of_worker_groups(helm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`processes`: a worker group per pod (one LISTEN for all), member k's metrics on the
    port + k, declared on the container and the metrics Service; 1 by default."""
    from rara.worker.settings import WorkerSettings

    docs = render(
        helm, "--set-json", 'pools=[{"name":"multi","capabilities":["a.b@1"],"processes":3}]'
    )
    [container] = named(docs, "Deployment", "rara-worker-multi")["spec"]["template"]["spec"][
        "containers"
    ]
    worker = settings_of(monkeypatch, container, WorkerSettings)
    assert worker.processes == 3
    port = worker.metrics_port
    ports = {(p["name"], p["containerPort"]) for p in container["ports"]}
    assert ports == {("metrics", port), ("metrics-1", port + 1), ("metrics-2", port + 2)}
    service = named(docs, "Service", "rara-worker-multi-metrics")
    assert {(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {
        ("metrics", port, "metrics"),
        ("metrics-1", port + 1, "metrics-1"),
        ("metrics-2", port + 2, "metrics-2"),
    }
    [default] = named(render(helm), "Deployment", "rara-worker-cpu")["spec"]["template"]["spec"][
        "containers"
    ]
    assert settings_of(monkeypatch, default, WorkerSettings).processes == 1
    assert [p["name"] for p in default["ports"]] == ["metrics"]
    assert "processes" in refused(
        helm, "--set-json", 'pools=[{"name":"x","capabilities":["a.b@1"],"processes":0}]'
    )


def test_a_pool_setting_must_be_a_setting_name(helm: Path) -> None:
    pools = '[{"name":"cpu","capabilities":["a.b@1"],"settings":{"Held-Back":1}}]'
    assert "Held-Back" in refused(helm, "--set-json", f"pools={pools}")


def test_operator_command(helm: Path) -> None:
    docs = render(helm)
    dep = named(docs, "Deployment", "rara-operator")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["operator"]
    assert env_of(container)["RARA_OPERATOR_NAMESPACES"]["value"] == "ml"
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == "rara-operator"
    # Its metrics (backlog per capability, the WorkflowRun status sync) on the chart's port.
    assert env_of(container)["RARA_OPERATOR_METRICS_PORT"]["value"] == "9100"
    assert {"name": "metrics", "containerPort": 9100} in container["ports"]
    wide_docs = render(helm, "--set", "operator.clusterWide=true")
    wide = named(wide_docs, "Deployment", "rara-operator")
    (container,) = wide["spec"]["template"]["spec"]["containers"]
    env = env_of(container)
    assert env["RARA_OPERATOR_ALL_NAMESPACES"]["value"] == "true"
    assert "RARA_OPERATOR_NAMESPACES" not in env
    # Cluster-wide, kopf peers through the cluster-scoped kind.
    assert named(wide_docs, "ClusterKopfPeering", "rara-operator")
    assert not by_kind(wide_docs, "KopfPeering")


def test_operator_replicas_are_peered(helm: Path) -> None:
    """Two replicas by default, one at work (kopf peering, docs/operator.md): they share the
    chart's KopfPeering, each named after its pod; a rollout surges (the new pod stands by),
    a drain evicts one at a time, and the replicas prefer different nodes."""
    docs = render(helm)
    dep = named(docs, "Deployment", "rara-operator")
    pod = dep["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = env_of(container)
    assert dep["spec"]["replicas"] == 2
    assert env["RARA_OPERATOR_PEERING_NAME"]["value"] == "rara-operator"
    assert env["RARA_OPERATOR_PEERING_LIFETIME"]["value"] == "15"
    assert env["POD_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert named(docs, "KopfPeering", "rara-operator")
    assert dep["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    selector = dep["spec"]["selector"]["matchLabels"]
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"] == {
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": {"matchLabels": selector},
    }
    pdb = named(docs, "PodDisruptionBudget", "rara-operator")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}

    one = render(
        helm,
        "--set",
        "operator.replicas=1",
        "--set",
        "operator.peeringLifetime=5",
        "--set-json",
        'operator.affinity={"nodeAffinity":{}}',
    )
    dep = named(one, "Deployment", "rara-operator")
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["template"]["spec"]["affinity"] == {"nodeAffinity": {}}
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert env_of(container)["RARA_OPERATOR_PEERING_LIFETIME"]["value"] == "5"
    for bad in ("operator.replicas=0", "operator.peeringLifetime=2"):
        refused(helm, "--set", bad)


def test_artifacts_in_s3_by_url_and_credentials_by_reference(
    helm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """artifacts.s3: every worker and executor gets RARA_ARTIFACTS (no artifact_root, which
    would win over it) and the key pair from a Secret; without a Secret, nothing: the pods'
    identity."""
    from rara.artifacts.location import S3Config
    from rara.executor.settings import ExecutorSettings
    from rara.worker.settings import WorkerSettings

    s3 = [
        "--set",
        "artifacts.s3.bucket=arts",
        "--set",
        "artifacts.s3.prefix=/team/a/",
        "--set",
        "artifacts.s3.endpoint=http://minio.storage:9000",
        "--set",
        "artifacts.s3.region=eu-west-1",
    ]
    for secret in ("s3creds", ""):
        docs = render(helm, *s3, "--set", f"artifacts.s3.existingSecret={secret}")
        containers = [
            c
            for d in by_kind(docs, "Deployment")
            for c in d["spec"]["template"]["spec"]["containers"]
            if c["name"] in ("worker", "executor")
        ]
        assert {c["name"] for c in containers} == {"worker", "executor"}
        for container in containers:
            env = env_of(container)
            url = env["RARA_ARTIFACTS"]["value"]
            cfg = S3Config.parse(url)
            assert (cfg.bucket, cfg.prefix, cfg.endpoint, cfg.region) == (
                "arts",
                "team/a/",
                "http://minio.storage:9000",
                "eu-west-1",
            )
            assert not [n for n in env if n.endswith("ARTIFACT_ROOT")]
            if secret:
                assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {
                    "name": "s3creds",
                    "key": "AWS_SECRET_ACCESS_KEY",
                }
                assert "value" not in env["AWS_ACCESS_KEY_ID"]
            else:
                assert not [n for n in env if n.startswith("AWS_")]
            with monkeypatch.context() as menv:
                for entry in container["env"]:
                    if "value" in entry and entry["name"] != "RARA_ARTIFACTS":
                        menv.setenv(entry["name"], entry["value"])
                cls = ExecutorSettings if container["name"] == "executor" else WorkerSettings
                assert "artifact_root" not in cls.load().model_fields_set
    refused(helm, "--set", "artifacts.s3.endpoint=http://key:secret@host")  # credentials in it


def test_each_process_reads_its_own_login(helm: Path) -> None:
    """database.<process>.existingSecret (docs/least-privilege.md): every worker (in pools and
    in executor pods) reads the worker login's Secret, the operator its own, the UI its own,
    and only the migration Job the owner's."""
    docs = render(
        helm,
        "--set",
        "database.existingSecret=owner",
        "--set",
        "database.worker.existingSecret=worker-login",
        "--set",
        "database.operator.existingSecret=operator-login",
        "--set",
        "database.operator.secretKey=dsn",
        "--set",
        "ui.enabled=true",
        "--set",
        "ui.database.existingSecret=ui-reader",
    )
    seen: dict[str, set[tuple[str, str]]] = {}
    for workload in by_kind(docs, "Deployment") + by_kind(docs, "Job"):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            for name, entry in env_of(container).items():
                if name.endswith("DATABASE_URL"):
                    ref = entry["valueFrom"]["secretKeyRef"]
                    seen.setdefault(container["name"], set()).add((ref["name"], ref["key"]))
    assert seen == {
        "worker": {("worker-login", "url")},
        "operator": {("operator-login", "dsn")},
        "ui": {("ui-reader", "url")},
        "migrate": {("owner", "url")},
    }


def test_default_pools_scale_for_what_they_serve(helm: Path) -> None:
    """Each WorkerPool's capabilities are exactly those its pods serve (the default handlers'
    and plugins'): a capability missing from its pool is a backlog that never scales the pool
    up from zero, and one that no pod serves scales pods that cannot drain it (the defaults
    once listed index.build on the CPU pool and an embed.batch nobody serves)."""
    from rara.executor.plugins import PluginRegistry, load_plugin_modules
    from rara.worker.registry import load_registry

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    plugins = PluginRegistry()
    load_plugin_modules(plugins, [values["executor"]["plugins"]])
    served = {
        values["pools"][0]["name"]: load_registry([values["worker"]["handlers"]]).capabilities(),
        values["executor"]["name"]: {p.capability for p in plugins.plugins()},
    }
    pools = {
        d["metadata"]["name"]: set(d["spec"]["capabilities"])
        for d in by_kind(render(helm, *VARIANTS["defaults"]), "WorkerPool")
    }
    assert pools == {
        f"rara-{kind}-{name}": served[name]
        for kind, name in (
            ("worker", values["pools"][0]["name"]),
            ("executor", values["executor"]["name"]),
        )
    }
