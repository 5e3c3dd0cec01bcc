"""One configuration style for every process: flags > ``RARA_<PROCESS>_*`` env > file > defaults.

Each process (worker, executor, operator) declares a :class:`ProcessSettings` subclass with its
``env_prefix``; everything else lives here once:

- ``Settings.load(file, **flags)`` applies the precedence. Flags that are ``None`` (or an empty
  list) count as "not given". The file is YAML, or TOML by its suffix, and sits below the
  environment, so a deployment's env overrides a shared file.
- :func:`command` turns a settings class into a typer command (its help: ``command_help``)
  with one flag per setting (help from the field's description, its env variable and
  default), plus ``--config FILE`` (env ``RARA_<PROCESS>_CONFIG``). Old flag spellings are
  kept through the class's ``flag_names``.
- A bad value exits 2 with one line naming the field, its flag and its env variable
  (:func:`describe`), credentials masked.

List settings take JSON or a comma-separated string (``RARA_WORKER_HANDLERS=a.b,c.d``) and,
as flags, repeat (``--handlers a.b --handlers c.d``) or take commas.
"""

from __future__ import annotations

import inspect
import json
import types
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self, TypeVar, Union, get_args, get_origin

import typer
from pydantic import Field, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)

from rara.secrets import redact

StrList = Annotated[list[str], NoDecode]  # parsed by ProcessSettings._split, not as JSON only
LogLevel = Literal["debug", "info", "warning", "error"]

# The file of the settings being loaded; read by settings_customise_sources (a context variable,
# not a subclass per call, so errors name the real class and concurrent loads cannot mix).
_FILE: ContextVar[Path | None] = ContextVar("rara_settings_file", default=None)


class ProcessSettings(BaseSettings):
    """What every process has, and the sources in their order. Subclasses set ``env_prefix``."""

    model_config = SettingsConfigDict(extra="forbid")
    # Flag spellings other than --field-name (kept for users and the chart), by field.
    flag_names: ClassVar[Mapping[str, Sequence[str]]] = {}
    command_help: ClassVar[str] = ""  # what the command taking these settings does

    log_level: LogLevel = Field(default="info", description="debug, info, warning or error")
    log_json: bool | None = Field(
        default=None, description="JSON log lines (default: when stderr is not a TTY)"
    )

    @field_validator("*", mode="before")
    @classmethod
    def _split(cls, value: Any, info: Any) -> Any:
        """Lists from env and files: JSON (``["a","b"]``) or commas (``a,b``); flags: each
        repeated value may hold commas too."""
        field = cls.model_fields.get(info.field_name)
        if field is None or not _is_list(field.annotation):
            return value
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            value = [text]
        if isinstance(value, list | tuple):
            return [part.strip() for item in value for part in str(item).split(",") if part.strip()]
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        file = _FILE.get()
        if file is None:
            return init_settings, env_settings
        source: PydanticBaseSettingsSource = (
            TomlConfigSettingsSource(settings_cls, toml_file=file)
            if file.suffix == ".toml"
            else YamlConfigSettingsSource(settings_cls, yaml_file=file)
        )
        return init_settings, env_settings, source

    @classmethod
    def load(cls, file: Path | None = None, **flags: Any) -> Self:
        """Settings from flags (``None``: not given), the environment and ``file``."""
        given = {k: v for k, v in flags.items() if v is not None and v != []}
        if file is not None and not file.is_file():
            raise FileNotFoundError(f"settings file {file} does not exist")
        token = _FILE.set(file)
        try:
            return cls(**given)
        finally:
            _FILE.reset(token)

    @classmethod
    def env_name(cls, field: str) -> str:
        return f"{cls.model_config.get('env_prefix', '')}{field}".upper()

    @classmethod
    def flags_of(cls, field: str) -> tuple[str, ...]:
        return tuple(cls.flag_names.get(field, ())) or ("--" + field.replace("_", "-"),)


S = TypeVar("S", bound=ProcessSettings)


def describe(exc: ValidationError, cls: type[ProcessSettings]) -> str:
    """One line per bad value, naming the field, its flag and env variable (never a secret)."""
    lines = []
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        if not loc:  # a check across fields (a model validator): its message names them
            lines.append(error["msg"].removeprefix("Value error, "))
            continue
        field = loc[0]
        where = f"{'/'.join(cls.flags_of(field))}, env {cls.env_name(field)}"
        got = error.get("input")
        shown = f" (got {got!r})" if isinstance(got, str | int | float) else ""
        lines.append(f"{'.'.join(loc)}: {error['msg']}{shown} [{where}]")
    return redact("; ".join(lines))


def command(cls: type[S], run: Callable[[S], int | None]) -> Callable[..., None]:
    """A typer command taking every setting of ``cls`` as a flag, then calling ``run(settings)``.

    ``run`` returns the exit code (None: 0). Settings errors exit 2 with :func:`describe`.
    """
    prefix = cls.model_config.get("env_prefix", "")
    prog = "rara " + prefix.removeprefix("RARA_").rstrip("_").lower()

    def _command(config: Path | None = None, **values: Any) -> None:
        try:
            settings = cls.load(config, **values)
        except ValidationError as exc:
            typer.echo(f"{prog}: {describe(exc, cls)}", err=True)
            raise typer.Exit(2) from None
        except (OSError, ValueError) as exc:  # a missing or unparsable settings file
            typer.echo(f"{prog}: {redact(str(exc))}", err=True)
            raise typer.Exit(2) from None
        raise typer.Exit(run(settings) or 0)

    config = inspect.Parameter(
        "config",
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[
            Path | None,
            typer.Option(
                "--config",
                envvar=f"{prefix}CONFIG",
                show_envvar=False,
                help=f"Settings file: YAML, or TOML by its .toml suffix; below env and flags "
                f"(env {prefix}CONFIG)",
            ),
        ],
    )
    # The process's own settings first, then the ones every process has (logging).
    names = sorted(cls.model_fields, key=lambda name: name in ProcessSettings.model_fields)
    params = [_parameter(cls, name, cls.model_fields[name]) for name in names]
    _command.__signature__ = inspect.Signature([*params, config])  # type: ignore[attr-defined]
    _command.__doc__ = cls.command_help
    return _command


def main(command: Callable[..., None], name: str) -> None:
    """Run ``command`` as a program of its own (``python -m rara.<process>.main``)."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(command)
    app(prog_name=f"rara {name}")


def _parameter(cls: type[ProcessSettings], name: str, field: FieldInfo) -> inspect.Parameter:
    kind = _flag_type(field.annotation)
    decls = list(cls.flags_of(name))
    if kind is bool:
        decls = [d if "/" in d or not d.startswith("--") else f"{d}/--no-{d[2:]}" for d in decls]
    option = typer.Option(*decls, help=_help(cls, name, field), show_default=False)
    return inspect.Parameter(
        name,
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[kind | None, option],
    )


def _help(cls: type[ProcessSettings], name: str, field: FieldInfo) -> str:
    text = field.description or name.replace("_", " ")
    if field.is_required():
        default = "required"
    elif field.default is PydanticUndefined or field.default is None:
        default = ""
    else:
        value = field.default
        default = ", ".join(value) if isinstance(value, list) else f"{value}"
        default = f"default {default}" if default else ""
    extra = f"; {default}" if default else ""
    return f"{text} (env {cls.env_name(name)}{extra})"


def _strip_optional(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        (annotation,) = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def _is_list(annotation: Any) -> bool:
    return get_origin(_strip_optional(annotation)) is list


def _flag_type(annotation: Any) -> Any:
    annotation = _strip_optional(annotation)
    if get_origin(annotation) is list:
        return list[str]
    if get_origin(annotation) is Literal:
        return str  # pydantic checks the value and names the field when it is wrong
    return annotation
