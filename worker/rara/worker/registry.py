"""In-process handlers, registered under an explicit capability ``name@major``.

Convention for handler modules (``rara worker --handlers mypkg.handlers``): the module defines
a module-level ``registry = Registry()`` and decorates its handlers with it::

    from rara.worker.registry import Registry

    registry = Registry()

    @registry.handler("corpus.collect@1")
    async def collect(ctx: StepContext) -> StepOutcome | JSON: ...

No global registry: what a worker serves is exactly what the modules it was given export, and
two modules claiming one capability is an error at start-up, not a silent override.

A handler takes the StepContext and returns a ``StepOutcome`` or a plain JSON value (the
result). Async handlers run on the worker's event loop; sync handlers run in a thread
(``asyncio.to_thread``) so heartbeats go on while they work.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, TypeVar

from rara.context import StepContext

_CAPABILITY = re.compile(r"^[a-z0-9][a-z0-9._-]*@[0-9]+$")

Handler = Callable[[StepContext], Any] | Callable[[StepContext], Awaitable[Any]]
H = TypeVar("H", bound=Callable[..., Any])


class RegistryError(ValueError):
    pass


class Registry:
    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def register(self, capability: str, fn: Handler) -> None:
        if not _CAPABILITY.match(capability):
            raise RegistryError(f"capability {capability!r} must look like name@major")
        if capability in self._handlers and self._handlers[capability] is not fn:
            raise RegistryError(f"capability {capability} is registered twice")
        self._handlers[capability] = fn

    def handler(self, capability: str) -> Callable[[H], H]:
        def decorate(fn: H) -> H:
            self.register(capability, fn)
            return fn

        return decorate

    def get(self, capability: str) -> Handler:
        return self._handlers[capability]

    def is_async(self, capability: str) -> bool:
        fn = self._handlers[capability]
        return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 - async callable objects count too
        )

    def capabilities(self) -> set[str]:
        return set(self._handlers)

    def merge(self, other: Registry) -> None:
        for capability, fn in other._handlers.items():
            self.register(capability, fn)

    def __contains__(self, capability: object) -> bool:
        return capability in self._handlers

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._handlers))


def load_registry(modules: Iterable[str]) -> Registry:
    """Import each dotted module path and merge its ``registry``."""
    merged = Registry()
    for path in modules:
        module = importlib.import_module(path)
        found = getattr(module, "registry", None)
        if not isinstance(found, Registry):
            raise RegistryError(
                f"handler module {path} must define `registry = rara.worker.registry.Registry()`"
            )
        merged.merge(found)
    return merged
