"""``rara worker``: run a worker process; one flag per setting of
:class:`rara.worker.settings.WorkerSettings` (flags > ``RARA_WORKER_*`` > ``--config`` file)."""

from __future__ import annotations

from rara import settings
from rara.worker.settings import WorkerSettings


def _run(config: WorkerSettings) -> int:
    from rara.worker.main import run

    return run(config)


worker = settings.command(WorkerSettings, _run)
