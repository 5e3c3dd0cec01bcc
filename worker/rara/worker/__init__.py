"""The rara worker: leases steps from PostgreSQL and runs them.

Its modules, from the process down to the database (``make lint`` holds them to this order:
``[tool.importlinter]`` in pyproject.toml):

- ``__main__``, ``main``: a worker process (``rara worker``): settings, executors, signal
  handlers, the ``Worker``.
- ``member``, ``group``, ``relay``: a worker group (``rara worker --processes N``): a
  supervisor holding the group's one LISTEN connection, relaying it to N worker processes.
- ``runner``: the ``Worker``'s loops: lease, listener, heartbeat, reaper, progress; graceful
  stop.
- ``attempt``: one attempt's supervisor, from lease to its one final write.
- ``context``: the ``StepContext`` handlers get (``WorkerStepContext``).
- ``attempt_io``: what a running attempt writes through (checkpoint, progress, end, release).
- ``batcher``: attempts' ends written many per transaction (``CompletionBatcher``).
- ``progress``: progress writes, coalesced and rate-limited (``ProgressWriter``).
- ``grpc_executor``: the ``grpc`` executor (steps run in executor services).
- ``dispatch``: the ``Executor`` protocol and the ``inprocess`` executor.
- ``registry``: in-process handlers by capability.
- ``testing``: bulk enqueue and leasing by hand, for tests and benchmarks.
- ``store``: every fenced write of an attempt, its SQL and the rows it answers, on the
  worker's pool and hot connections.
- ``lease_cursor``: where the next lease scan of a (capability, executor) pair starts.
- ``listener``: LISTEN/NOTIFY (``rara_ready``, ``rara_cancel``).
- ``retry``: riding out database outages.
- ``failures``: a handler's error as JSON.
- ``settings``: flags > environment > file.
- ``vocabulary``: the words the others share: the leased step, its fence, the attempt's state,
  why it stops, and its end. Types only, no I/O.
"""
