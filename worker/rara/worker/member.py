"""``python -m rara.worker.member``: one worker process of a worker group (rara.worker.group),
started by the group's supervisor, never by hand.

Its settings come as the first line of stdin (JSON), the group's notifications after it
(rara.worker.relay); then it is an ordinary worker (rara.worker.main) with that relay in place
of a LISTEN connection of its own.
"""

from __future__ import annotations

import signal
import sys

from pydantic import ValidationError

from rara.settings import describe
from rara.worker import relay
from rara.worker.main import run
from rara.worker.settings import WorkerSettings


def main() -> int:
    # Until the worker sets its handlers (after its executors load), SIGINT ends it as SIGTERM
    # does: the supervisor forwards either, and a KeyboardInterrupt traceback from the middle
    # of an import would only be noise.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        settings = WorkerSettings.model_validate_json(relay.read_header())
    except (EOFError, ValidationError) as exc:
        text = describe(exc, WorkerSettings) if isinstance(exc, ValidationError) else str(exc)
        print(f"rara worker member: {text}", file=sys.stderr)
        return 2
    return run(settings, relay.relayed())


if __name__ == "__main__":
    sys.exit(main())
