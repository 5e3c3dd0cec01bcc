"""The test toolkit: helpers any test may import (conftest modules keep only fixtures).

Test-only code, outside the wheel. The benchmarks (bench/) may import from here; nothing here
or in the tests imports bench/.
"""
