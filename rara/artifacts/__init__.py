"""Content-addressed artifacts (sha256), in a directory or S3-compatible object storage."""

from rara.artifacts.opening import open_store

__all__ = ["open_store"]
