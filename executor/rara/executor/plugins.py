"""Plugins: the code an executor runs, registered by explicit name and major version.

A plugin is ``(ctx: StepContext) -> StepOutcome``, async or sync. Sync plugins run in a
thread of their own so that a CPU- or GPU-bound call does not stall the event loop that
streams progress and answers Cancel.

Plugin modules named with ``--plugins`` expose ``register(registry)``: an explicit hook
rather than import-time side effects on a global, so tests can build registries freely
and a module imported twice does not register twice.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from rara.context import StepContext, StepOutcome
from rara.executor.errors import IncompatibleJob
from rara.v1 import executor_pb2 as pb

Plugin = Callable[[StepContext], Awaitable[StepOutcome | None] | StepOutcome | None]

_NAME = re.compile(r"^[a-z][a-z0-9_.-]*\Z")  # \Z: "$" would let "name\n" through
_MAJOR = re.compile(r"^[0-9]{1,9}\Z")  # as definitions' name@major, bounded to fit an int32


@dataclass(frozen=True, slots=True)
class RegisteredPlugin:
    name: str
    major: int
    fn: Plugin
    is_async: bool
    gpu: int = 0
    memory_bytes: int = 0

    @property
    def capability(self) -> str:
        return f"{self.name}@{self.major}"

    def to_proto(self) -> pb.Capability:
        return pb.Capability(
            name=self.name,
            major=self.major,
            resources=pb.Resources(gpu=self.gpu, memory_bytes=self.memory_bytes),
        )


def parse_capability(capability: str) -> tuple[str, int]:
    """``"adapt.lora@1"`` -> ``("adapt.lora", 1)``; IncompatibleJob when malformed."""
    name, sep, major = capability.rpartition("@")
    # ASCII digits only: str.isdigit() accepts "²", which int() then refuses (a crash found
    # by tests/executor/test_executor_fuzz.py), and Arabic-Indic digits, which int() reads.
    if not sep or not _NAME.match(name) or not _MAJOR.match(major):
        raise IncompatibleJob(f"capability must look like name@major, got {capability!r}")
    return name, int(major)


def _is_async(fn: Callable[..., Any]) -> bool:
    # A callable object with an ``async def __call__`` is async too.
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - we want the method, not callability
    )


class PluginRegistry:
    """Name -> plugin (one major version per name per executor process)."""

    def __init__(self) -> None:
        self._by_name: dict[str, RegisteredPlugin] = {}

    def register(
        self, name: str, major: int, fn: Plugin, *, gpu: int = 0, memory_bytes: int = 0
    ) -> RegisteredPlugin:
        if not _NAME.match(name):
            raise ValueError(f"plugin name must match {_NAME.pattern}, got {name!r}")
        if major < 0:
            raise ValueError(f"major version must be >= 0, got {major}")
        if name in self._by_name:
            raise ValueError(f"plugin {name!r} is already registered")
        plugin = RegisteredPlugin(name, major, fn, _is_async(fn), gpu, memory_bytes)
        self._by_name[name] = plugin
        return plugin

    def resolve(self, capability: str) -> RegisteredPlugin:
        """The plugin for ``name@major``, or IncompatibleJob saying why not."""
        name, major = parse_capability(capability)
        plugin = self._by_name.get(name)
        if plugin is None:
            raise IncompatibleJob(
                f"capability {name!r} is not served by this executor",
                code=pb.ERROR_CODE_UNKNOWN_CAPABILITY,
                details={"capability": capability},
            )
        if plugin.major != major:
            raise IncompatibleJob(
                f"capability {name!r}: job wants major version {major}, "
                f"this executor serves {plugin.major}",
                code=pb.ERROR_CODE_INCOMPATIBLE_VERSION,
                details={"capability": capability, "served": plugin.capability},
            )
        return plugin

    def plugins(self) -> list[RegisteredPlugin]:
        return sorted(self._by_name.values(), key=lambda p: p.name)


def load_plugin_modules(registry: PluginRegistry, modules: Iterable[str]) -> None:
    """Import each module and call its ``register(registry)``."""
    for path in modules:
        module = importlib.import_module(path)
        hook = getattr(module, "register", None)
        if not callable(hook):
            raise ValueError(f"plugin module {path!r} has no register(registry) function")
        hook(registry)
