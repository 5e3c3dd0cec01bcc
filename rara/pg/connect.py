"""Where the database is: ``DATABASE_URL``, or the project's embedded server."""

from __future__ import annotations

import os

from rara.pg.embedded import project_server


def database_url(explicit: str | None = None) -> str:
    """An explicit URL, else ``DATABASE_URL``, else the embedded server (started if needed)."""
    if explicit:
        return explicit
    if env := os.environ.get("DATABASE_URL"):
        return env
    return project_server().up()
