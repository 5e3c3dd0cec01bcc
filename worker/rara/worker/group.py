"""A worker group: ``rara worker --processes N``, N worker processes under a small supervisor.

PostgreSQL wakes every backend that LISTENs in a database at each NOTIFY, whatever its
channel (docs/operations.md, "Worker groups"), so a fleet's listening processes multiply the
server's cost of every step that becomes ready. A group holds one LISTEN connection for all
its processes: this supervisor runs ``rara.worker.listener.listen`` and relays what it hears
(``rara.worker.relay``) to each member, which wires it to the same callbacks its own listener
would have.

Each member is a whole worker (``python -m rara.worker.member``): its executors, slots,
leases and connections, its id ``<group id>-<k>``, its metrics on ``metrics_port + k``. It
gets its settings as the first line of its stdin (JSON, never on a command line where ``ps``
shows the database URL's password), then the relay. Members are processes of their own
(subprocess: a fresh interpreter, as multiprocessing's spawn would start, without its pickling
and re-import of the main module; waiting for one and the pipe to it are asyncio's own), in a
session of their own, so that a terminal's Ctrl-C reaches them once, through the supervisor.

SIGTERM/SIGINT go to every member (a second one, too: it skips the rest of the grace); the
supervisor waits for them all and exits 1 when one did not stop cleanly. A member that exits
while the group runs is started again after a backoff and logged; its leases come back by
lease expiry and any worker's reaper, as for any worker killed. A member that exits 2 (its
handlers cannot be loaded) stops the group with exit code 2: starting it again cannot help.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys

import structlog
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from rara import logs
from rara.pg.connect import database_url
from rara.secrets import redact
from rara.worker.listener import listen
from rara.worker.relay import Fanout
from rara.worker.retry import Backoff
from rara.worker.settings import WorkerSettings

log = structlog.get_logger("rara.worker")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# A member that ran this long before it exited starts again without the backoff of the
# exits before: a crash a day is not a crash loop.
STEADY_SECONDS = 60.0
RESTART_CAP = 30.0
CONFIG_ERROR = 2  # a member's exit code when its handlers cannot be loaded (rara.worker.main)


def member_settings(settings: WorkerSettings, url: str, k: int) -> WorkerSettings:
    """Member ``k``'s settings: the group's, with its own id and metrics port, and the URL the
    supervisor resolved (members must not each start the embedded server)."""
    update: dict[str, object] = {"id": f"{settings.id}-{k}", "processes": 1, "database_url": url}
    if settings.metrics_port:  # 0 (any free port) stays 0
        update["metrics_port"] = settings.metrics_port + k
    values = settings.model_dump(exclude_unset=True) | update
    return WorkerSettings.model_validate(values)  # validated: an id too long fails here, once


def listener_url(url: str) -> str:
    """The listener's connection, named ``<application_name or 'rara worker'> listener`` so
    that ``pg_stat_activity`` tells it from the members' connections."""
    name = conninfo_to_dict(url).get("application_name") or "rara worker"
    return make_conninfo(url, application_name=f"{name} listener"[:63])


class Group:
    def __init__(self, settings: WorkerSettings, url: str) -> None:
        self.settings = settings
        self.url = url
        self.members = [member_settings(settings, url, k) for k in range(settings.processes)]
        self.fanout = Fanout()
        self.procs: dict[int, asyncio.subprocess.Process] = {}
        self.stopping = asyncio.Event()
        self.signals: list[int] = []  # forwarded so far, in order: a late starter gets the first
        self.exit_code = 0
        self.log = log.bind(worker=settings.id)

    def signalled(self, sig: int) -> None:
        self.log.info("stopping worker group", signal=signal.Signals(sig).name)
        self._stop(sig)

    def _stop(self, sig: int) -> None:
        self.signals.append(sig)
        self.stopping.set()
        for proc in self.procs.values():
            if proc.returncode is None:
                proc.send_signal(sig)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, self.signalled, sig)
        listener = None
        if self.settings.listen:
            f = self.fanout
            listener = loop.create_task(
                listen(
                    listener_url(self.url),
                    on_ready=f.on_ready,
                    on_cancel=f.on_cancel,
                    on_connect=f.on_connect,
                    on_waits=f.on_waits,
                    on_queued=f.on_queued,
                    on_lost=f.on_lost,
                )
            )
            listener.add_done_callback(self._listener_ended)
        self.log.info("worker group started", processes=self.settings.processes)
        try:
            await asyncio.gather(*(self._keep(k) for k in range(len(self.members))))
        finally:
            if listener is not None:
                listener.cancel()
                await asyncio.gather(listener, return_exceptions=True)
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)
        self.log.info("worker group stopped", exit_code=self.exit_code)
        return self.exit_code

    def _listener_ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:  # a bug: members poll now
            self.log.error("group listener died", exc_info=task.exception())
            self.fanout.on_lost()

    async def _keep(self, k: int) -> None:
        """Member ``k``, started again whenever it exits before the group stops."""
        loop = asyncio.get_running_loop()
        backoff = Backoff(cap=RESTART_CAP)
        while not self.stopping.is_set():
            started = loop.time()
            proc = await self._start(k)
            code = await proc.wait()
            self.fanout.remove(k)
            if proc.stdin is not None:
                proc.stdin.close()
            del self.procs[k]
            if self.stopping.is_set():
                # Killed by the forwarded signal itself: it had not set its handlers yet, which
                # it does before its first lease, so nothing was left undone.
                if code not in (0, *(-s for s in STOP_SIGNALS)):
                    self.log.error("worker process did not stop cleanly", member=k, code=code)
                    self.exit_code = self.exit_code or 1
                return
            if code == CONFIG_ERROR:
                self.log.error("worker process cannot start; stopping the group", member=k)
                self.exit_code = CONFIG_ERROR
                self._stop(signal.SIGTERM)
                return
            if loop.time() - started >= STEADY_SECONDS:
                backoff.reset()
            delay = backoff.next_delay()
            self.log.error(
                "worker process exited; restarting",
                member=k,
                pid=proc.pid,
                code=code,
                retry_in=round(delay, 3),
            )
            with contextlib.suppress(TimeoutError):  # the group stopping ends the wait
                await asyncio.wait_for(self.stopping.wait(), delay)

    async def _start(self, k: int) -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "rara.worker.member",
            stdin=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        self.procs[k] = proc
        assert proc.stdin is not None
        # Only what was set: an artifact_root left unset defers to RARA_ARTIFACTS, there too.
        header = self.members[k].model_dump_json(exclude_unset=True)
        proc.stdin.write(header.encode() + b"\n")
        self.fanout.add(k, proc.stdin)
        if self.signals:  # the group began to stop while this one started
            proc.send_signal(self.signals[0])
        self.log.info("worker process started", member=k, pid=proc.pid, id=self.members[k].id)
        return proc


def run(settings: WorkerSettings) -> int:
    """Run the group until SIGTERM/SIGINT; the exit code."""
    logs.configure(settings.log_level, json=settings.log_json)
    structlog.contextvars.bind_contextvars(worker=settings.id)
    last_port = (settings.metrics_port or 0) + settings.processes - 1
    if settings.metrics_port and last_port > 65535:
        print(f"rara worker: metrics ports to {last_port} (port + k) exceed 65535", file=sys.stderr)
        return 2
    try:
        url = database_url(settings.database_url)
        group = Group(settings, url)
    except ValueError as exc:  # a member's settings (its id) invalid
        print(f"rara worker: {redact(str(exc))}", file=sys.stderr)
        return 2
    # uvloop where installed, as for a worker (rara.worker.main): listen() alone, 2,000
    # notifications at 100 a second, cost ~220 µs of CPU each on it, ~290 on asyncio's loop.
    try:
        import uvloop
    except ImportError:  # pragma: no cover - Windows
        return asyncio.run(group.run())
    return uvloop.run(group.run())
