"""Tests of the `rara` command line (rara.cli): output, screens, and its artifact commands."""
