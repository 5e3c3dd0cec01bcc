"""The restart smoke under chaos: handlers, executor plugins, the fleet and its chaos driver,
and the invariants checked afterwards (see tests/e2e/test_restart_smoke.py)."""
