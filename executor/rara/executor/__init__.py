"""The out-of-process executor service (gRPC, ``rara.v1.ExecutorService``).

It runs capability plugins for workers and streams their events back; it never touches
the database (the worker that holds the lease writes what it hears). Modules:

- ``plugins``: registry of plugins by name and major version
- ``wire``: protobuf <-> Python conversion of jobs, refs and JSON
- ``outbox`` / ``context``: the StepContext a plugin sees and the ordered event channel
- ``jobs``: one job attempt from accepted to its single terminal event
- ``server`` / ``auth`` / ``main``: the gRPC service, its security and its entry point
- ``client``: the async client the worker adapter uses
- ``conformance`` / ``conformance_checks`` / ``conformance_probe`` / ``conformance_plugins``:
  checks any implementation against the contract (the runner and its report, the checks, what
  a check gets), and the probe plugins an endpoint serves for it
"""
