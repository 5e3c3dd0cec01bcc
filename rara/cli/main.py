"""The `rara` command."""

from __future__ import annotations

import typer

from rara.cli import artifacts, db, definitions, executor, operator, runs, status, worker

app = typer.Typer(
    help="rara: a durable workflow runtime for ML/RAG pipelines on PostgreSQL.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(db.app, name="db")
app.add_typer(definitions.app, name="definitions")
app.add_typer(runs.app, name="runs")
app.add_typer(artifacts.app, name="artifacts")
app.command("migrate")(db.migrate_command)
app.command("status")(status.status)
app.command("executor", context_settings=executor.EXECUTOR_SETTINGS, add_help_option=False)(
    executor.executor
)
app.command("executor-conformance")(executor.conformance)
app.command("worker")(worker.worker)
app.command("operator")(operator.operator_command)
