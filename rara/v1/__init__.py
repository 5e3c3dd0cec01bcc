"""Generated code for the ``rara.v1`` wire contract (``api/proto/rara/v1/executor.proto``).

Everything here except this file is produced by ``api/gen.sh`` and committed; never edit it
by hand. Import the modules directly::

    from rara.v1 import executor_pb2 as pb, executor_pb2_grpc as pb_grpc

The streamed message is named ``ExecuteResponse`` (buf's STANDARD lint wants
``<Rpc>Response``); each one is one *event* of a job, so code may say ``ExecuteEvent``.
"""

from rara.v1.executor_pb2 import ExecuteResponse as ExecuteEvent

__all__ = ["ExecuteEvent"]
