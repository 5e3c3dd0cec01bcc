"""The test toolkit: helpers any test may import (conftest modules keep only fixtures).

Test-only code, outside the wheel. The benchmarks (bench/) may import from here; nothing here
imports bench/, and of the tests only bench's own (tests/bench/) do (an import contract of
pyproject.toml).
"""
