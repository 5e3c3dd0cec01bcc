"""What every CLI command shares: error reporting, JSON/file arguments, the console and the
namespace options (``--namespace/-n``, ``-A/--all-namespaces``).

Exit codes: 0 ok; 1 the command ran but the run did not succeed (or a wait timed out);
2 bad input or a refused request (one ``error: …`` line on stderr, never a traceback);
3 the database cannot be reached.
"""

from __future__ import annotations

import enum
import functools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar, cast

import psycopg
import typer
from rich.console import (
    Console,
    ConsoleDimensions,
    HighlighterType,
    JustifyMethod,
    OverflowMethod,
)
from rich.style import Style
from rich.table import Table
from rich.text import Text

from rara.client import Client
from rara.definitions.model import RUNS_NOTHING
from rara.errors import DefinitionInvalid, InputInvalid, RaraError
from rara.namespaces import ENV, check_namespace
from rara.secrets import redact

# C0 and C1 control characters but tab and newline (an escape sequence: colours, a terminal
# hyperlink, a cursor move or a title; a carriage return that overwrites the line), and the
# bidirectional overrides that reorder what is shown: each as its escape, visibly.
_SHOWN_AS_ESCAPES = {
    c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
    for c in (
        *(c for c in range(0x20) if c not in (0x09, 0x0A)),
        *range(0x7F, 0xA0),
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
    )
}


def visible(text: str) -> str:
    """``text`` with every control character shown as its escape (``\\x1b``)."""
    return text.translate(_SHOWN_AS_ESCAPES)


def literal(value: object, style: str | Style = "") -> Text:
    """A value that is data — a step's error or result, a log line, a name, a reason — as Rich
    prints it whatever the console: its characters as they are, never markup (``[link=…]``
    is text), never an emoji code, a control character as its escape. Every CLI output that
    embeds such a value goes through this, or prints on ``console`` (which treats every
    string so); markup is only ever written as Text built by rara's own code."""
    return Text(visible(str(value)), style=style)


#: Columns of a console that writes to no terminal (a pipe, a log file) with no COLUMNS: wide
#: enough for every table rara prints without a cut cell (rich's default there is 80).
PIPED_WIDTH = 200


class WideWhenPiped(Console):
    """A console whose tables are not cut at 80 columns in a pipe or a log file (`make demo
    | tee`, CI): writing to no terminal, and with no COLUMNS to say otherwise, it is
    ``PIPED_WIDTH`` wide; on a terminal, the terminal's width."""

    def __init__(self, *args: Any, width: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, width=width, **kwargs)
        # rich fixes the width from COLUMNS once, here; rara reads COLUMNS at each use (size).
        self._width = width

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        if self._width is not None:
            return size
        # COLUMNS read now, not only when the console was made (rich's way): one process that
        # runs several commands (a test's CliRunner) sets it per command.
        columns = self._environ.get("COLUMNS", "")
        if columns.isdigit():
            return ConsoleDimensions(int(columns), size.height)
        if not self.is_terminal:
            return ConsoleDimensions(PIPED_WIDTH, size.height)
        return size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


class LiteralConsole(WideWhenPiped):
    """A console on which every string is data (``literal``): printed or in a Table's cell or
    title, nothing in it is read as markup or emoji, and control characters show as escapes.
    Styling is Text (``literal(…, style)``, ``Text.assemble``)."""

    def render_str(
        self,
        text: str,
        *,
        style: str | Style = "",
        justify: JustifyMethod | None = None,
        overflow: OverflowMethod | None = None,
        emoji: bool | None = None,
        markup: bool | None = None,
        highlight: bool | None = None,
        highlighter: HighlighterType | None = None,
    ) -> Text:
        return super().render_str(
            visible(text),
            style=style,
            justify=justify,
            overflow=overflow,
            emoji=False,
            markup=False,
            highlight=highlight,
            highlighter=highlighter,
        )


console = LiteralConsole(soft_wrap=True)
err_console = LiteralConsole(stderr=True, soft_wrap=True)

P = ParamSpec("P")
R = TypeVar("R")


def stamp(value: datetime | None) -> str:
    """An instant as every command shows it, the dashboard's way: UTC, and said so
    (``2026-12-05 08:41:01 UTC``); "" for none."""
    return "" if value is None else f"{value.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def attempts(capability: str, attempt: int, max_attempts: int) -> str:
    """A step's "attempt/max"; "" for a wait or a gate, which is never leased (no attempts)."""
    return "" if capability in RUNS_NOTHING else f"{attempt}/{max_attempts}"


def one_line(text: str) -> str:
    """Collapse a multi-line message (a YAML error with its source excerpt) onto one line."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def error_message(exc: BaseException) -> str:
    if isinstance(exc, DefinitionInvalid):  # one problem a line, a YAML excerpt kept whole
        return str(exc)
    return one_line(str(exc)) or type(exc).__name__


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``error: message`` on stderr; returns the Exit to raise.

    The message is data (``literal``): it may quote user input or a worker's error, and rich
    would read ``[/x]`` in it as markup (and raise on an unmatched tag, which is a traceback).
    Credential-looking text is masked: a connection error quotes the URL, password included.
    """
    err_console.print(Text.assemble(("error:", "red"), " ", literal(redact(message))))
    return typer.Exit(code)


def reports_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn rara's errors into one clear line on stderr and exit code 2 (no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except RaraError as exc:
            raise fail(error_message(exc)) from None
        except TimeoutError as exc:
            raise fail(error_message(exc), code=1) from None
        except psycopg.OperationalError as exc:
            raise fail(f"cannot reach the database: {error_message(exc)}", code=3) from None
        except psycopg.DataError as exc:  # a value PostgreSQL refuses: still the caller's input
            raise fail(f"the database refused a value: {error_message(exc)}") from None
        except psycopg.errors.InsufficientPrivilege as exc:  # the login's grants, not a bug
            raise fail(f"not permitted: {error_message(exc)}") from None

    return wrapper


def read_text_arg(path: Path, what: str, max_bytes: int | None = None) -> str:
    """A file's text, or InputInvalid naming the file and what is wrong with it."""
    try:
        if max_bytes is not None and (size := path.stat().st_size) > max_bytes:
            raise InputInvalid(f"{what}: {path} is {size} bytes; the limit is {max_bytes}")
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputInvalid(f"{what}: cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise InputInvalid(f"{what}: {path} is not UTF-8 text ({exc.reason})") from exc


def read_document_arg(file: Path, max_bytes: int) -> tuple[str, str]:
    """The text of ``-f FILE`` ('-': stdin) and the name problems are reported against."""
    if str(file) == "-":
        return typer.get_text_stream("stdin").read(), "<stdin>"
    return read_text_arg(file, "-f", max_bytes=max_bytes), str(file)


def parse_json_arg(value: str | None, what: str, max_bytes: int | None = None) -> Any:
    """A JSON argument given inline or as @file."""
    if value is None:
        return None
    text = value
    if value.startswith("@"):
        text = read_text_arg(Path(value[1:]), what, max_bytes)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputInvalid(f"{what} is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise InputInvalid(f"{what} nests too deeply") from exc


def parse_json_object_arg(
    value: str | None, what: str, max_bytes: int | None = None
) -> dict[str, Any] | None:
    """Like ``parse_json_arg``, but only a JSON object (``[]`` or ``null`` must not pass as
    "no input")."""
    parsed = parse_json_arg(value, what, max_bytes)
    if value is not None and not isinstance(parsed, dict):
        kind = "null" if parsed is None else type(parsed).__name__
        raise InputInvalid(f"{what} must be a JSON object, got {kind}")
    return cast(dict[str, Any] | None, parsed)


# Not typer's envvar=: a namespace given on the command line is explicit (a document naming
# another is refused), one from RARA_NAMESPACE is not; Client reads the variable itself.
NamespaceOption = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        "-n",
        metavar="NAME",
        show_default=False,
        help=f"the namespace to work in (default: ${ENV}, else default)",
    ),
]


class Output(enum.StrEnum):
    """What a command that shows one object prints: lines for people, or the object whole."""

    TEXT = "text"
    JSON = "json"


OutputOption = Annotated[
    Output,
    typer.Option(
        "--output", "-o", help="text for people (default); json: the whole object, for scripts"
    ),
]
AllNamespacesOption = Annotated[
    bool,
    typer.Option(
        "--all-namespaces", "-A", help="list every namespace's, with a namespace column first"
    ),
]


def namespace_client(namespace: str | None) -> Client:
    """The client of a command's ``--namespace`` (None: not given, so RARA_NAMESPACE, else
    default); InputInvalid naming the flag, or the variable, for a name that is no namespace."""
    if namespace is not None:
        check_namespace(namespace, source="--namespace")
    return Client(namespace=namespace)


@contextmanager
def client_connection(client: Client) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection as ``client``'s login, for a command's few statements."""
    with psycopg.connect(client.url, autocommit=True) as conn:
        yield conn


def print_listing(
    columns: Sequence[str],
    rows: Iterable[tuple[str, Sequence[str]]],
    *,
    all_namespaces: bool,
) -> None:
    """A list command's table of (namespace, cells) rows: with ``-A`` a namespace column
    first, as kubectl prints; else the namespace is the one asked for and goes unsaid."""
    first = ("namespace",) if all_namespaces else ()
    table = Table(*first, *columns)
    for namespace, cells in rows:
        table.add_row(*((namespace,) if all_namespaces else ()), *cells)
    console.print(table)
