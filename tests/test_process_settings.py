"""One configuration style for the worker, the executor and the operator (rara/settings.py).

Precedence per process (flag > ``RARA_<PROCESS>_*`` env > file > default), bad values named
by field, flag and env variable, and each command's ``--help`` listing every setting under
the flag names users and the chart have always used. Commands run as real processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import ValidationError
from typer.testing import CliRunner

from rara import settings
from rara.executor.settings import ExecutorSettings
from rara.operator.settings import OperatorSettings
from rara.settings import ProcessSettings, describe
from rara.worker.settings import WorkerSettings

RARA = Path(sys.executable).with_name("rara")  # the console script of this environment
TIMEOUT_S = 60.0  # a cold `rara` imports typer, pydantic and the CLI's modules

# Per process: a numeric setting, its file, env and flag values, and what else is required.
CASES: dict[str, tuple[type[ProcessSettings], str, Any, Any, Any, dict[str, Any]]] = {
    "worker": (WorkerSettings, "concurrency", 3, 5, 7, {}),
    "executor": (ExecutorSettings, "max_concurrency", 3, 5, 7, {"artifact_root": "/a"}),
    "operator": (OperatorSettings, "scale_interval", 3.0, 5.0, 7.0, {}),
}


def rara(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RARA), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, "COLUMNS": "250", **(env or {})},
        check=False,
    )


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("RARA_WORKER_", "RARA_EXECUTOR_", "RARA_OPERATOR_")):
            monkeypatch.delenv(name)


@pytest.mark.parametrize("process", list(CASES))
@pytest.mark.parametrize("suffix", [".yaml", ".toml"])
def test_flag_beats_env_beats_file(
    process: str, suffix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cls, field, in_file, in_env, in_flag, required = CASES[process]
    file = tmp_path / f"{process}{suffix}"
    lines = [
        f"{key} = {value!r}" if suffix == ".toml" else f"{key}: {value}"
        for key, value in {field: in_file, **required}.items()
    ]
    file.write_text("\n".join(lines) + "\n")
    assert getattr(cls.load(file), field) == in_file
    monkeypatch.setenv(cls.env_name(field), str(in_env))
    assert getattr(cls.load(file), field) == in_env
    assert getattr(cls.load(file, **{field: in_flag}), field) == in_flag
    assert getattr(cls.load(file, **{field: None}), field) == in_env  # None: not given


def parse(cls: type[ProcessSettings], *args: str, env: dict[str, str] | None = None) -> Any:
    """The settings the command of ``cls`` hands its process, for these flags and env."""
    seen: list[ProcessSettings] = []
    app = typer.Typer()
    app.command()(settings.command(cls, seen.append))
    result = CliRunner().invoke(app, list(args), env=env)
    assert result.exit_code == 0, result.output
    (parsed,) = seen
    return parsed


def test_commands_apply_the_same_precedence(tmp_path: Path) -> None:
    file = tmp_path / "operator.toml"
    file.write_text("scale_interval = 3.0\nrun_sync_interval = 3.0\nliveness = 'http://f'\n")
    env = {
        "RARA_OPERATOR_SCALE_INTERVAL": "5",
        "RARA_OPERATOR_RUN_SYNC_INTERVAL": "5",
        "RARA_OPERATOR_CONFIG": str(file),
    }
    operator = parse(OperatorSettings, "--scale-interval", "7", env=env)
    assert (operator.scale_interval, operator.run_sync_interval, operator.liveness) == (
        7.0,
        5.0,
        "http://f",
    )


def test_old_flag_spellings_reach_the_settings() -> None:
    operator = parse(OperatorSettings, "-n", "a", "--namespace", "b,c", "-v")
    assert operator.served_namespaces() == ("a", "b", "c")
    assert operator.log_level == "debug"
    assert parse(OperatorSettings, "-A", "-n", "a").served_namespaces() == ()
    worker = parse(
        WorkerSettings,
        "-H",
        "x.h",
        "--id",
        "w1",
        "-c",
        "a@1",
        "--capability",
        "b@1",
        "--executor-endpoint",
        "h:1",
        "--no-listen",
    )
    assert (
        worker.handlers,
        worker.id,
        worker.capabilities,
        worker.executor_endpoints,
        worker.listen,
    ) == (["x.h"], "w1", ["a@1", "b@1"], ["h:1"], False)
    executor = parse(
        ExecutorSettings,
        "--artifact-root",
        "/a",
        "--plugins",
        "p.q",
        "--insecure-loopback",
        "--grace",
        "2",
        "--metrics-port",
        "0",
    )
    assert (
        executor.plugins,
        executor.insecure_loopback,
        executor.grace,
        executor.metrics_port,
    ) == (["p.q"], True, 2.0, 0)


def test_lists_from_env_json_and_repeated_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RARA_WORKER_HANDLERS", "one.handlers, two.handlers")
    monkeypatch.setenv("RARA_EXECUTOR_PLUGINS", '["a.plugins", "b.plugins"]')
    assert WorkerSettings.load().handlers == ["one.handlers", "two.handlers"]
    assert ExecutorSettings.load(artifact_root="/a").plugins == ["a.plugins", "b.plugins"]
    executor = ExecutorSettings.load(artifact_root="/a", plugins=["c.plugins", "d.x,e.y"])
    assert executor.plugins == ["c.plugins", "d.x", "e.y"]  # repeated flags may hold commas


def test_bad_values_are_named_by_field_flag_and_env(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as caught:
        ExecutorSettings.load(artifact_root="/a", max_concurrency=0, grace=-1)
    text = describe(caught.value, ExecutorSettings)
    assert "max_concurrency: Input should be greater than or equal to 1 (got 0)" in text
    assert "[--max-concurrency, env RARA_EXECUTOR_MAX_CONCURRENCY]" in text
    assert "grace: Input should be greater than or equal to 0 (got -1)" in text  # all at once
    with pytest.raises(ValidationError) as caught:
        WorkerSettings.load(lease_seconds=1, heartbeat_seconds=2)
    assert (
        describe(caught.value, WorkerSettings)
        == "heartbeat_seconds must be shorter than lease_seconds"
    )
    file = tmp_path / "operator.yaml"
    file.write_text("scale_intervall: 3\n")  # a typo in a file is refused, not ignored
    with pytest.raises(ValidationError) as caught:
        OperatorSettings.load(file)
    assert "scale_intervall: Extra inputs are not permitted" in describe(
        caught.value, OperatorSettings
    )
    with pytest.raises(FileNotFoundError, match=r"nowhere\.yaml"):
        WorkerSettings.load(tmp_path / "nowhere.yaml")


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (
            ["executor", "--artifact-root", "/a", "--max-concurrency", "0"],
            {},
            "max_concurrency: Input should be greater than or equal to 1 (got 0) "
            "[--max-concurrency, env RARA_EXECUTOR_MAX_CONCURRENCY]",
        ),
        (
            ["worker"],
            {"RARA_WORKER_JITTER": "2"},
            "jitter: Input should be less than or equal to 1 (got '2')",
        ),
        (["operator"], {"RARA_OPERATOR_LOG_LEVEL": "loud"}, "log_level: Input should be "),
        # A bad value that holds a credential is named, never printed.
        (
            ["worker"],
            {"RARA_WORKER_METRICS_PORT": "postgresql://u:hunter2pass@db/x"},
            "metrics_port: Input should be a valid integer",
        ),
    ],
    ids=["executor-flag", "worker-env", "operator-env", "credential"],
)
def test_commands_refuse_bad_values_naming_them(
    args: list[str], env: dict[str, str], expected: str
) -> None:
    done = rara(*args, env=env)
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr
    assert "hunter2pass" not in done.stderr
    assert "Traceback" not in done.stderr


# Every flag spelling users and the chart have used, per command (before this module existed).
OLD_FLAGS = {
    "executor": [
        "--listen",
        "--token-file",
        "--tls-cert",
        "--tls-key",
        "--tls-client-ca",
        "--insecure-loopback",
        "--max-concurrency",
        "--plugins",
        "--artifact-root",
        "--grace",
        "--cancel-grace",
        "--metrics-port",
    ],
    "worker": [
        "--handlers",
        "-H",
        "--database-url",
        "--id",
        "--capability",
        "-c",
        "--concurrency",
        "--lease-seconds",
        "--heartbeat-seconds",
        "--jitter",
        "--shutdown-grace-seconds",
        "--cancel-grace-seconds",
        "--poll-seconds",
        "--reaper-seconds",
        "--reaper-batch",
        "--artifact-root",
        "--executor-endpoint",
        "--executor-token-file",
        "--metrics-port",
        "--listen",
        "--no-listen",
        "--log-level",
        "--config",
    ],
    "operator": [
        "--namespace",
        "-n",
        "--all-namespaces",
        "-A",
        "--database-url",
        "--scale-interval",
        "--run-sync-interval",
        "--liveness",
        "--metrics-port",
        "--verbose",
        "-v",
    ],
}
CLASSES = {"worker": WorkerSettings, "executor": ExecutorSettings, "operator": OperatorSettings}


@pytest.mark.parametrize("process", list(OLD_FLAGS))
def test_help_lists_every_setting_and_every_old_flag(process: str) -> None:
    done = rara(process, "--help")
    assert done.returncode == 0, done.stderr
    words = set(done.stdout.replace(",", " ").split())
    cls = CLASSES[process]
    for field in cls.model_fields:
        assert cls.flags_of(field)[0].split("/")[0] in words, field
        assert cls.env_name(field) in done.stdout, field
    assert f"RARA_{process.upper()}_CONFIG" in done.stdout
    missing = [flag for flag in OLD_FLAGS[process] if flag not in words]
    assert not missing, f"rara {process} --help lacks {missing}"


@pytest.mark.parametrize(
    ("module", "process"), [("rara.executor.main", "executor"), ("rara.worker", "worker")]
)
def test_python_m_is_the_same_command(module: str, process: str) -> None:
    """``python -m rara.executor.main`` and ``python -m rara.worker`` (scripts, tests, the
    demo) are the commands of ``rara executor`` and ``rara worker``, without the CLI layer."""
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        env={**os.environ, "COLUMNS": "250"},
    )
    assert done.returncode == 0, done.stderr
    assert f"Usage: rara {process} [OPTIONS]" in done.stdout
    assert f"RARA_{process.upper()}_ARTIFACT_ROOT" in done.stdout
