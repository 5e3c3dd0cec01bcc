"""`rara ui`: the web dashboard (rara.ui), on loopback and read-only unless told otherwise."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from rara.cli.common import console, err_console, fail
from rara.pg.connect import database_url
from rara.ui.auth import SESSION_SECONDS, parse_tokens


def read_token(token_file: Path | None) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """The actions' tokens, by reference: a file (a mounted secret) of one token, or of one
    ``NAME TOKEN`` line per person (rara.ui.auth.parse_tokens); else RARA_UI_TOKEN."""
    if token_file is not None:
        try:
            text = token_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise fail(f"--token-file: cannot read {token_file}: {exc.strerror or exc}") from None
        try:
            return parse_tokens(text, f"--token-file {token_file}")
        except ValueError as exc:
            raise fail(str(exc)) from None
    return os.environ.get("RARA_UI_TOKEN") or None, ()


def ui(
    host: Annotated[
        str, typer.Option(envvar="RARA_UI_HOST", help="address to bind (loopback by default)")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(min=0, max=65535, envvar="RARA_UI_PORT", help="port to listen on")
    ] = 8080,
    db_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            envvar=["RARA_UI_DATABASE_URL", "DATABASE_URL"],
            show_envvar=True,
            help="PostgreSQL URL (default: the embedded server)",
        ),
    ] = None,
    read_only: Annotated[
        bool,
        typer.Option(
            "--read-only/--no-read-only",
            envvar="RARA_UI_READ_ONLY",
            help="refuse every action: cancel, retry and resume a run, approve or reject a "
            "gate, pause and resume a schedule",
        ),
    ] = True,
    token_file: Annotated[
        Path | None,
        typer.Option(
            envvar="RARA_UI_TOKEN_FILE",
            help="file holding the token that allows actions (else $RARA_UI_TOKEN), or one "
            "'NAME TOKEN' line per person: a decision made with NAME's token records NAME",
        ),
    ] = None,
    auth_header: Annotated[
        str | None,
        typer.Option(
            envvar="RARA_UI_AUTH_HEADER",
            help="trust this header as the user's identity (set by an authenticating proxy, "
            "e.g. X-Forwarded-User); only behind such a proxy",
        ),
    ] = None,
    user_roles: Annotated[
        bool,
        typer.Option(
            "--user-roles/--no-user-roles",
            envvar="RARA_UI_USER_ROLES",
            help="read and act as the database role named by --auth-header's user (SET LOCAL "
            "ROLE per request): each user sees their namespaces only; the login must be a "
            "member of every user's role",
        ),
    ] = False,
    session_seconds: Annotated[
        int,
        typer.Option(
            min=1,
            envvar="RARA_UI_SESSION_SECONDS",
            help="a login's lifetime: its cookie is refused after this many seconds, after "
            "logout, or once the server restarts",
        ),
    ] = SESSION_SECONDS,
    artifacts: Annotated[
        str | None,
        typer.Option(
            "--artifacts",
            envvar="RARA_ARTIFACTS",
            help="artifact store for downloads: a directory or s3://…",
        ),
    ] = None,
    pool_size: Annotated[
        int,
        typer.Option(min=1, max=100, help="database connections the dashboard keeps at most"),
    ] = 8,
) -> None:
    """Serve the web dashboard: runs as live DAGs, attempts, metrics, artifacts, the fleet."""
    import uvicorn

    from rara.ui.app import UiConfig, create_app
    from rara.ui.auth import AuthConfig

    token, people = read_token(token_file)
    if not read_only and token is None and not people and auth_header is None:
        raise fail(
            "--no-read-only needs an identity for actions: --token-file, "
            "RARA_UI_TOKEN or --auth-header"
        )
    if user_roles and not auth_header:
        raise fail(
            "--user-roles needs --auth-header: the user whose database role each request "
            "takes is the one the authenticating proxy's header names"
        )
    config = UiConfig(
        database_url=database_url(db_url),
        auth=AuthConfig(
            read_only=read_only,
            token=token,
            people=people,
            auth_header=auth_header,
            user_roles=user_roles,
            session_seconds=session_seconds,
        ),
        artifacts=artifacts,
        pool_size=pool_size,
    )
    if not read_only and (auth_header or people) and not user_roles:
        _check_vouching(config.database_url)
    mode = "read-only" if read_only else "actions allowed to authenticated users"
    if user_roles:
        mode += f", each user's own namespaces (the role {auth_header} names)"
    console.print(f"rara ui on http://{host}:{port} ({mode})", highlight=False)
    uvicorn.run(
        create_app(config),
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=3,
        proxy_headers=False,
    )


def _check_vouching(url: str) -> None:
    """Say at start when the login cannot vouch for the users the header names: the database
    then refuses their decisions (docs/ui.md, "Waits and approvals"). Nothing said when the
    database cannot be reached yet: the pages say so."""
    import psycopg

    from rara.pg.waits import login_vouches

    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            vouches = login_vouches(conn)
            login = conn.info.user
    except psycopg.Error:
        return
    if not vouches:
        err_console.print(
            f"warning: the login {login} is not in rara_vouch, so the database refuses the "
            "decisions of the people the header or the token file names (as the owner: "
            f"GRANT rara_vouch TO {login}; docs/ui.md)",
            highlight=False,
            markup=False,
        )
