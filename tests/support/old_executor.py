"""An executor as it was before Session: ``python -m tests.support.old_executor ADDRESS``.

The real servicer and server, less the new RPC: GetCapabilities lists no ``protocols`` and
Session is unimplemented (UNIMPLEMENTED, as an old build's generated code answers). A worker
must fall back to an Execute call per job against it."""

from __future__ import annotations

import asyncio
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import grpc

from rara.artifacts.store import LocalArtifactStore
from rara.executor import conformance_plugins, limits
from rara.executor.plugins import PluginRegistry
from rara.executor.server import ExecutorServicer
from rara.v1 import executor_pb2 as pb
from rara.v1 import executor_pb2_grpc as pb_grpc


class _OldServicer(ExecutorServicer):
    async def GetCapabilities(
        self, request: pb.GetCapabilitiesRequest, context: Any
    ) -> pb.GetCapabilitiesResponse:
        response = await super().GetCapabilities(request, context)
        del response.protocols[:]
        return response

    async def Session(self, request_iterator: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
        yield  # an async generator, as the servicer's streaming methods are


async def serve(address: str) -> None:
    registry = PluginRegistry()
    conformance_plugins.register(registry)
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalArtifactStore(Path(tmp), durable=False)
        server = grpc.aio.server(options=limits.GRPC_OPTIONS)
        servicer = _OldServicer(registry, store, max_concurrency=16, cancel_grace=1.0)
        pb_grpc.add_ExecutorServiceServicer_to_server(servicer, server)
        server.add_insecure_port(address)
        await server.start()
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        print(f"old executor listening on {address}", flush=True)
        await stop.wait()
        await server.stop(1.0)


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
