"""Opening the artifact store a location names (``rara.artifacts.location``): a directory or
``s3://…``. Above both stores, so neither needs to know the other or this.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from rara.artifacts.location import S3Config, resolve

if TYPE_CHECKING:
    from rara.artifacts.api import ArtifactStore


def open_store(location: str | os.PathLike[str] | None = None) -> ArtifactStore:
    """The artifact store at ``location`` (see :func:`resolve`): a directory or ``s3://…``.

    The S3 store needs the ``s3`` extra (``pip install 'rara[s3]'``). Opening does no I/O on
    S3; the first request does, and names the bucket and key in any error.
    """
    where = resolve(location)
    if where.startswith("s3://"):
        try:
            from rara.artifacts.s3 import S3ArtifactStore
        except ImportError as exc:  # pragma: no cover - depends on the installed extras
            raise RuntimeError(
                f"{where.split('?', 1)[0]}: the S3 artifact store needs the s3 extra "
                f"(pip install 'rara[s3]'): {exc}"
            ) from exc
        return S3ArtifactStore(S3Config.parse(where))
    if "://" in where:
        raise ValueError(
            f"unsupported artifact store {where.split('?', 1)[0]!r}: a directory "
            "or s3://bucket/prefix"
        )
    # Imported here, as the S3 store is: `import rara.artifacts` (every process's, through
    # rara.context) stays as light as reading a location.
    from rara.artifacts.store import LocalArtifactStore

    return LocalArtifactStore(Path(where))
