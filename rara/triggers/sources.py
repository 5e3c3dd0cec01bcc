"""Where an objects trigger looks: a folder below the watcher's root, or an S3 prefix.

A source lists its objects with a *fingerprint* each — what the store says without reading the
bytes (size and modification time in nanoseconds for a file; size and ETag for an S3 object) —
and reads an object's bytes to hash them when its fingerprint is new. The watcher
(rara.triggers.objects) decides by digest, so the same bytes written again, which change the
fingerprint, start nothing.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol

from rara.artifacts.location import S3Config

HASH_CHUNK = 1 << 20
MAX_KEY_LENGTH = 1024


@dataclass(frozen=True, slots=True)
class Listed:
    key: str  # relative to the folder or the prefix, with / between parts
    size: int
    fingerprint: str


class SourceUnavailable(Exception):
    """The source cannot be listed or read now (gone, refused, unreachable): the pass says so
    in the trigger's status and tries again at its next poll."""


class Source(Protocol):
    def listing(self) -> Iterator[Listed]: ...

    def digest(self, key: str) -> str: ...


def location_problem(location: str) -> str | None:
    """Why ``location`` names no source (None: it does)."""
    if location.startswith("s3://"):
        try:
            S3Config.parse(location)
        except ValueError as exc:
            return str(exc)
        return None
    path = PurePosixPath(location)
    if path.is_absolute() or ".." in path.parts or "\\" in location:
        return (
            f"{location!r}: a folder is named relative to the watcher's --objects-root, "
            "without '..' (or give an s3:// URL)"
        )
    return None


def open_source(location: str, root: Path | None) -> Source:
    """The source ``location`` names; SourceUnavailable when this process cannot watch it."""
    if location.startswith("s3://"):
        return S3Prefix(S3Config.parse(location))
    if root is None:
        raise SourceUnavailable(
            f"folder {location!r}: this process watches no folders (rara triggers serve "
            "--objects-root DIR)"
        )
    return Folder(root, root / location)


class Folder:
    """Regular files below ``path`` (symbolic links are not followed out of it)."""

    def __init__(self, root: Path, path: Path) -> None:
        self.root = root.resolve()
        self.path = path

    def _checked(self) -> Path:
        try:
            real = self.path.resolve(strict=True)
        except OSError as exc:
            raise SourceUnavailable(f"folder {self._name()}: {exc.strerror or exc}") from None
        if not real.is_relative_to(self.root) or not real.is_dir():
            raise SourceUnavailable(f"folder {self._name()}: not a folder below the root")
        return real

    def _name(self) -> str:
        return str(self.path.relative_to(self.root)) if self.path.is_relative_to(self.root) else "?"

    def listing(self) -> Iterator[Listed]:
        base = self._checked()
        for folder, dirs, files in os.walk(base, onerror=_raise, followlinks=False):
            dirs.sort()
            for name in sorted(files):
                path = Path(folder) / name
                try:
                    info = path.lstat()
                except FileNotFoundError:  # removed while listed: not there
                    continue
                if not stat.S_ISREG(info.st_mode):
                    continue
                key = path.relative_to(base).as_posix()
                if len(key) <= MAX_KEY_LENGTH:
                    yield Listed(key, info.st_size, f"{info.st_size}:{info.st_mtime_ns}")

    def digest(self, key: str) -> str:
        base = self._checked()
        path = base / key
        sha = hashlib.sha256()
        try:
            with path.open("rb") as f:
                while chunk := f.read(HASH_CHUNK):
                    sha.update(chunk)
        except OSError as exc:
            raise SourceUnavailable(f"{key}: {exc.strerror or exc}") from None
        return "sha256:" + sha.hexdigest()


def _raise(exc: OSError) -> None:
    raise SourceUnavailable(f"{exc.filename}: {exc.strerror or exc}")


class S3Prefix:
    """The objects under an S3 prefix (minio's client, as the artifact store uses)."""

    def __init__(self, config: S3Config) -> None:
        # The s3 extra's client, imported only where an S3 prefix is watched.
        import urllib3
        from minio.error import MinioException

        from rara.artifacts.s3_client import make_client

        self.config = config
        self.client = make_client(config)
        # What a store that cannot answer raises: minio's errors, urllib3's (refused, reset,
        # timed out), the OS's.
        self.unavailable = (MinioException, urllib3.exceptions.HTTPError, OSError)

    def listing(self) -> Iterator[Listed]:
        try:
            for item in self.client.list_objects(
                self.config.bucket, prefix=self.config.prefix, recursive=True
            ):
                name = item.object_name or ""
                key = name.removeprefix(self.config.prefix)
                if not key or name.endswith("/") or len(key) > MAX_KEY_LENGTH:
                    continue
                size = item.size or 0
                yield Listed(key, size, f"{size}:{(item.etag or '').strip(chr(34))}")
        except self.unavailable as exc:
            raise SourceUnavailable(f"{self.config}: {type(exc).__name__}: {exc}") from None

    def digest(self, key: str) -> str:
        sha = hashlib.sha256()
        try:
            answer = self.client.get_object(self.config.bucket, self.config.prefix + key)
            try:
                for chunk in answer.stream(HASH_CHUNK):
                    sha.update(chunk)
            finally:
                answer.close()
                answer.release_conn()
        except self.unavailable as exc:
            raise SourceUnavailable(f"{key}: {type(exc).__name__}: {exc}") from None
        return "sha256:" + sha.hexdigest()
