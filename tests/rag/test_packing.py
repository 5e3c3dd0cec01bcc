"""Packed directories are deterministic and unpack safely on every Python 3.11 (the images'
Debian 3.11.2 lacks tarfile's extraction filters): regular files only, never outside dest."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest

from rara_rag.packing import pack_dir, unpack


def test_round_trip_is_byte_identical_and_deterministic(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.bin").write_bytes(b"\x00\x01")
    (src / "sub" / "b.txt").write_text("hello")
    packed = pack_dir(src)
    assert pack_dir(src) == packed
    out = unpack(packed, tmp_path / "out")
    assert (out / "a.bin").read_bytes() == b"\x00\x01"
    assert (out / "sub" / "b.txt").read_text() == "hello"


def _tarball(*members: tarfile.TarInfo) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info in members:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isreg() else None)
    return gzip.compress(buf.getvalue())


@pytest.mark.parametrize(
    "member",
    [
        ("../escape", tarfile.REGTYPE),
        ("/etc/evil", tarfile.REGTYPE),
        ("link", tarfile.SYMTYPE),
    ],
)
def test_unsafe_members_are_refused(tmp_path: Path, member: tuple[str, bytes]) -> None:
    name, kind = member
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = 1 if kind == tarfile.REGTYPE else 0
    if kind == tarfile.SYMTYPE:
        info.linkname = "/etc/passwd"
    with pytest.raises(ValueError, match="unsafe member"):
        unpack(_tarball(info), tmp_path / "out")
    assert not (tmp_path / "escape").exists()
