"""The `rara` command."""

from __future__ import annotations

import sys

import typer

# typer 0.29 (pinned) vendors click: its usage errors are these classes, not click's.
from typer._click.exceptions import NoArgsIsHelpError, UsageError

from rara.cli import (
    access,
    approvals,
    artifacts,
    cache,
    db,
    definitions,
    executor,
    init,
    limits,
    operator,
    pause,
    releases,
    retention,
    run_logs,
    runs,
    schedules,
    status,
    triggers,
    ui,
    worker,
)
from rara.cli.common import fail

app = typer.Typer(
    help="rara: a durable workflow runtime for ML/RAG pipelines on PostgreSQL.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(db.app, name="db")
app.add_typer(definitions.app, name="definitions")
runs.app.command("prune")(retention.prune)  # beside runs.py's commands: maintenance
runs.app.command("pause")(pause.pause)  # beside them too (rara.pauses)
runs.app.command("resume")(pause.resume)
runs.app.command("logs")(run_logs.logs)
app.add_typer(runs.app, name="runs")
app.add_typer(artifacts.app, name="artifacts")
app.add_typer(limits.app, name="limits")
app.add_typer(cache.app, name="cache")
app.add_typer(schedules.app, name="schedules")
app.add_typer(triggers.app, name="triggers")
app.add_typer(approvals.app, name="approvals")
app.add_typer(releases.app, name="releases")
app.add_typer(access.app, name="access")
app.command("migrate")(db.migrate_command)
app.command("status")(status.status)
app.command("executor")(executor.executor)
app.command("executor-conformance")(executor.conformance)
app.command("worker")(worker.worker)
app.command("operator")(operator.operator_command)
app.command("ui")(ui.ui)
app.command("init")(init.init)


def main() -> None:
    """The console script: usage errors (a bad flag, ``runs cancel abc``) come out as one
    ``error: …`` line with exit code 2, like every other refusal, instead of click's box."""
    command = typer.main.get_command(app)
    try:
        code = command.main(prog_name="rara", standalone_mode=False)
    except NoArgsIsHelpError as exc:  # `rara`, `rara runs`: the help, as click would
        exc.show()
        raise SystemExit(exc.exit_code) from None
    except UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "rara"
        message = exc.format_message().rstrip(".")
        raise SystemExit(
            fail(f"{message[:1].lower()}{message[1:]} (see: {where} --help)").exit_code
        ) from None
    except typer.Abort:
        raise SystemExit(fail("aborted", code=1).exit_code) from None
    sys.exit(code if isinstance(code, int) else 0)
