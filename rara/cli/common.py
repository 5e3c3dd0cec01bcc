"""What every CLI command shares: error reporting and the console."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import psycopg
import typer
from rich.console import Console

from rara.errors import InputInvalid, RaraError

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

P = ParamSpec("P")
R = TypeVar("R")


def reports_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn rara's errors into one clear line on stderr and exit code 2 (no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except RaraError as exc:
            err_console.print(f"[red]error:[/red] {exc}", markup=True, highlight=False)
            raise typer.Exit(2) from None
        except psycopg.OperationalError as exc:
            err_console.print(
                f"[red]error:[/red] cannot reach the database: {exc}", highlight=False
            )
            raise typer.Exit(3) from None

    return wrapper


def parse_json_arg(value: str | None, what: str) -> Any:
    """A JSON argument given inline or as @file."""
    if value is None:
        return None
    text = value
    if value.startswith("@"):
        path = Path(value[1:])
        try:
            text = path.read_text()
        except OSError as exc:
            raise InputInvalid(f"{what}: cannot read {path}: {exc.strerror}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputInvalid(f"{what} is not valid JSON: {exc}") from exc
