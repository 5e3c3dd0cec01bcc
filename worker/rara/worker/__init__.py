"""The rara worker: leases steps from PostgreSQL and runs them.

Modules: ``settings`` (flags > env > file), ``registry`` (in-process handlers),
``dispatch`` (the Executor protocol, the in-process executor), ``context`` (the StepContext
handlers get), ``attempt`` (one attempt from lease to its one final write), ``runner`` (the
loops: lease, heartbeat, reaper, progress; graceful stop), ``listener`` (LISTEN/NOTIFY),
``progress`` (progress and checkpoint writes), ``batcher`` (attempts' ends written many per
transaction), ``store`` (the worker's SQL over a pool and its two hot connections),
``retry`` (riding out outages), ``failures`` (errors as JSON), ``main`` (a process with
signal handlers), ``testing`` (bulk enqueue and handlers for tests and benchmarks).
"""
