"""Content-addressed artifacts (sha256), in a directory or S3-compatible object storage."""

from rara.artifacts.location import open_store

__all__ = ["open_store"]
