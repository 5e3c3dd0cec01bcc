"""Deterministic directory <-> bytes packing for artifacts (index, adapter, checkpoints).

A tarball normally records mtimes, owners and listing order, and gzip records a timestamp, so
two packs of identical files differ and defeat content addressing. Here members are sorted,
owners and mtimes zeroed, modes fixed, and the gzip header's mtime is 0.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path


def pack_dir(root: str | Path) -> bytes:
    """gzip'd USTAR of every regular file under ``root`` (relative paths, sorted)."""
    base = Path(root)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for path in sorted(p for p in base.rglob("*") if p.is_file()):
            data = path.read_bytes()
            info = tarfile.TarInfo(path.relative_to(base).as_posix())
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buf.getvalue(), compresslevel=6, mtime=0)


def unpack(data: bytes, dest: str | Path) -> Path:
    """Extract a ``pack_dir`` blob into ``dest`` (created); refuses unsafe member paths."""
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    try:
        raw = gzip.decompress(data)
    except (OSError, EOFError) as exc:
        raise ValueError(f"not a packed directory: {exc}") from exc
    # By hand rather than extractall(filter="data"): that filter exists only from Python 3.11.4,
    # and Debian bookworm's 3.11 (the images' interpreter) is 3.11.2. pack_dir writes regular
    # files under relative paths and nothing else, so anything else is refused.
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if not member.isreg() or not parts or Path(member.name).is_absolute() or ".." in parts:
                raise ValueError(f"not a packed directory: unsafe member {member.name!r}")
            target = out.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None  # a regular file always has a body
            target.write_bytes(source.read())
    return out
