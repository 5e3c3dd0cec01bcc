"""Content-addressed artifacts (sha256)."""
