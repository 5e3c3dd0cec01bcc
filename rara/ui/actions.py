"""The dashboard's writes: cancel, pause or resume a run, retry a failed one, resume it from
its failure or re-run a finished one from a step, decide an approval, pause or resume a
schedule, log in and out.

Each needs a server that is not read-only, an identity and a CSRF token bound to it
(``rara.ui.auth``). The work itself is rara's own: ``rara.client.Client`` (the same code as
``rara runs cancel``, ``pause``, ``resume``, ``rara runs start`` and ``rara runs retry
--from-failure``), on a
connection of its own in a thread, never through the pages' read-only pool. Under
``--user-roles`` that connection acts as the user (``SET ROLE``: it is the call's alone and
closed after it; rara.ui.user_roles): the database itself refuses another namespace's run."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import parse_qs

import psycopg
from anyio import to_thread
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from rara.client import Client
from rara.errors import NotFound, RaraError
from rara.namespaces import DEFAULT_NAMESPACE
from rara.ui import data
from rara.ui.auth import SESSION_COOKIE, AuthConfig
from rara.ui.decisions import gate_rejected, reason_problem
from rara.ui.links import page_namespace, schedule_href
from rara.ui.notes import back, decision_tone
from rara.ui.render import page
from rara.ui.user_roles import become, connection, user_of

T = TypeVar("T")

RETRYABLE = ("failed", "cancelled")


MAX_FORM = 16 * 1024


async def form(request: Request) -> dict[str, str]:
    """A small urlencoded form (our forms carry a token or two; no multipart dependency)."""
    body = await request.body()
    if len(body) > MAX_FORM:
        raise HTTPException(413, "form too large")
    return {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}


def _auth(request: Request) -> AuthConfig:
    auth: AuthConfig = request.app.state.config.auth
    return auth


async def authorised(request: Request) -> None:
    auth = _auth(request)
    if auth.read_only:
        raise HTTPException(403, "this dashboard is read-only")
    if auth.identity(request) is None:
        raise HTTPException(401, "log in first")
    fields = await form(request)
    if not auth.csrf_ok(request, fields.get("csrf", "")):
        raise HTTPException(403, "the form's CSRF token is missing or stale: reload the page")


class UserClient(Client):
    """A client acting as ``user`` (``--user-roles``). Each call has a connection of its own,
    closed after it, so the role is set for the whole session: the call keeps autocommit and
    with it rara.client's own transactions (a start's one statement, a cancel's retry after a
    deadlock), and no other call ever gets that connection."""

    def __init__(self, url: str, *, namespace: str, user: str) -> None:
        super().__init__(url, namespace=namespace)
        self.user = user

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            become(conn, self.user)
            yield conn


class VouchingClient(Client):
    """A client of the UI's own login that vouches for ``person``, whom the proxy's header
    names: each connection sets ``rara.identity``, so a run it starts or resumes records
    ``<person> via <login>`` as its starter (rara_caller_starter, for an approval's four-eyes).
    The database takes it only from a login in rara_vouch, and ignores it from any other."""

    def __init__(self, url: str, *, namespace: str, person: str) -> None:
        super().__init__(url, namespace=namespace)
        self.person = person

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("SELECT set_config('rara.identity', %s, false)", (self.person,))
            yield conn


def client_for(request: Request, namespace: str = DEFAULT_NAMESPACE) -> Client:
    """A client in ``namespace``: what it names by name (a definition to start, a schedule
    to pause) is that namespace's; under ``--user-roles``, acting as the user; else, with a
    person the proxy names, the UI's login vouching for them."""
    url = request.app.state.config.database_url
    user = user_of(request)
    if user is not None:
        return UserClient(url, namespace=namespace, user=user)
    who = person(request)
    if who is not None:
        return VouchingClient(url, namespace=namespace, person=who)
    return Client(url, namespace=namespace)


async def in_thread(action: Callable[[], T]) -> T:
    """``action`` in a thread; the database's refusal of the user (a namespace the user
    lacks: rara_namespace_access) is a 403 naming the role and the namespace, not a 500."""
    try:
        return await to_thread.run_sync(action)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise HTTPException(403, exc.diag.message_primary or str(exc)) from None


async def cancel(request: Request) -> Response:
    """Cancel a run, confirmed with a reason (refused without one: the page's note says so),
    which the database keeps with who cancelled (the run's error: rara_run_cancel)."""
    await authorised(request)
    run_id = int(request.path_params["run_id"])
    reason = (await form(request)).get("reason", "").strip()
    problem = reason_problem(reason, "a cancel")
    if problem:
        return back(f"/runs/{run_id}", f"cancel refused: {problem}", "refused")
    try:
        client = client_for(request)
        changed = await in_thread(lambda: client.cancel_run(run_id, reason=reason))
    except NotFound as exc:
        raise HTTPException(404, str(exc)) from exc
    except RaraError as exc:
        raise HTTPException(400, str(exc)) from exc
    if not changed:
        return back(f"/runs/{run_id}", "the run had ended", "info")
    return back(f"/runs/{run_id}", "cancel requested", "stopped")


async def pause(request: Request) -> Response:
    """Pause the run (``rara runs pause``); POST /runs/N/pause."""
    return await _set_paused(request, paused=True)


async def unpause(request: Request) -> Response:
    """Resume a paused run (``rara runs resume``); POST /runs/N/unpause (/runs/N/resume is the
    resume from failure, a new run)."""
    return await _set_paused(request, paused=False)


async def _set_paused(request: Request, *, paused: bool) -> Response:
    await authorised(request)
    run_id = int(request.path_params["run_id"])
    client = client_for(request)
    act = client.pause_run if paused else client.unpause_run
    try:
        change = await in_thread(lambda: act(run_id))
    except NotFound as exc:
        raise HTTPException(404, str(exc)) from exc
    except RaraError as exc:  # RunEnded
        raise HTTPException(409, str(exc)) from exc
    return back(f"/runs/{run_id}", change.text, "done" if change.changed else "info")


def retry_key(run_id: int) -> str:
    """The retry's idempotency key, derived from the run it retries: a double submit (two
    tabs, a reload) starts one retry, not two."""
    return f"rara-ui:retry-of:{run_id}"


async def retry(request: Request) -> Response:
    await authorised(request)
    run_id = int(request.path_params["run_id"])
    async with connection(request) as conn:
        run = await data.run_get(conn, run_id)
    if run is None:
        raise HTTPException(404, f"no run {run_id}")
    if run.status not in RETRYABLE:
        raise HTTPException(
            409, f"run {run_id} is {run.status}: only a failed or cancelled run is retried"
        )
    client = client_for(request, run.namespace)  # its run's definition, in its run's namespace
    try:
        started = await in_thread(
            lambda: client.start_run(
                run.definition,
                version=run.version,
                input=run.input,
                idempotency_key=retry_key(run_id),
            )
        )
    except RaraError as exc:
        return back(f"/runs/{run_id}", f"retry refused: {exc}", "refused")
    return back(
        f"/runs/{started.run_id}",
        f"retry of run {run_id}" + ("" if started.created else " (already started)"),
        "done" if started.created else "info",
    )


def resume_key(run_id: int) -> str:
    """The resume's idempotency key, derived as the retry's is: a double submit makes one
    run. A key of its own, so a plain retry and a resume of one run are two runs."""
    return f"rara-ui:resume-of:{run_id}"


async def resume(request: Request) -> Response:
    """Resume from failure (``Client.resume_run``, as `rara runs retry N --from-failure`): a
    new run that reuses every step that succeeded in this one. Whether a run can resume is
    the resume's own rule (``rara_run_resume``), not checked here again; its refusal goes
    back to the run's page as a note. A run whose approval gate was rejected is not resumed
    from here: it would reuse the evidence the gate saw and ask the same question again
    (rara.ui.decisions.gate_rejected)."""
    await authorised(request)
    run_id = int(request.path_params["run_id"])
    async with connection(request) as conn:
        rejected = gate_rejected(await data.run_approval_list(conn, run_id))
    if rejected:
        return back(f"/runs/{run_id}", f"resume refused: {rejected}", "refused")
    client = client_for(request)
    try:
        resumed = await in_thread(
            lambda: client.resume_run(run_id, idempotency_key=resume_key(run_id))
        )
    except NotFound as exc:
        raise HTTPException(404, str(exc)) from exc
    except RaraError as exc:
        return back(f"/runs/{run_id}", f"resume refused: {exc}", "refused")
    reused = f"{resumed.reused} step{'' if resumed.reused == 1 else 's'} reused"
    return back(
        f"/runs/{resumed.run_id}",
        f"resume of run {run_id}, {reused}" + ("" if resumed.created else " (already started)"),
        "done" if resumed.created else "info",
    )


def rerun_key(run_id: int, step: str) -> str:
    """The re-run's idempotency key, one per run and step: a double submit makes one run, a
    re-run from another step is another run."""
    return f"rara-ui:rerun-of:{run_id}:{step}"


async def rerun(request: Request) -> Response:
    """Re-run from a step (``Client.resume_run(rerun_from=)``, as `rara runs retry N
    --from-step STEP`): a new run in which the step and everything downstream of it run
    again and every other step that succeeded here is reused. The database refuses a run not
    finished or a step it lacks; the refusal goes back to the run's page as a note."""
    await authorised(request)
    run_id = int(request.path_params["run_id"])
    step = (await form(request)).get("step", "").strip()
    if not step:
        raise HTTPException(400, "step: the key of the step to re-run from")
    client = client_for(request)
    try:
        again = await in_thread(
            lambda: client.resume_run(
                run_id, rerun_from=step, idempotency_key=rerun_key(run_id, step)
            )
        )
    except NotFound as exc:
        raise HTTPException(404, str(exc)) from exc
    except RaraError as exc:
        return back(f"/runs/{run_id}", f"re-run refused: {exc}", "refused")
    return back(
        f"/runs/{again.run_id}",
        f"re-run of run {run_id} from step {step}, {again.reused} reused"
        + ("" if again.created else " (already started)"),
        "done" if again.created else "info",
    )


def person(request: Request) -> str | None:
    """Whom the UI's login vouches for (a decision is recorded as ``<person> via <login>``):
    the user the proxy's header names (``--auth-header``), or the person whose token logged
    in (a token file of ``NAME TOKEN`` lines: rara.ui.auth.parse_tokens). None for the shared
    token's holder, who is nobody in particular, and under ``--user-roles``, where the action
    runs as the user's own role: the decision then records the role it ran as."""
    if _auth(request).user_roles:
        return None
    identity = _auth(request).identity(request)
    return identity[5:] if identity and identity.startswith("user:") else None


async def decide(request: Request) -> Response:
    """Approve or reject an approval gate (``Client.decide_approval``, what `rara approvals
    approve|reject` do), as the person the UI authenticated, vouched for by its login (a
    member of rara_vouch: docs/ui.md); under ``--user-roles`` as the user's role, so a gate's
    approvers by role are the database's to check. A rejection needs a reason (refused here
    without one: rara.ui.decisions); an approval may give one. The database's refusals
    (decided the other way already, not an approver, past its deadline, the run's starter
    under four-eyes, a login that may not vouch) go back to the run's page as its note, in
    its words."""
    await authorised(request)
    run_id = int(request.path_params["run_id"])
    step_key = str(request.path_params["step_key"])
    fields = await form(request)
    choice = fields.get("decision")
    if choice not in ("approve", "reject"):
        raise HTTPException(400, "decision: approve or reject")
    reason = fields.get("reason", "").strip()
    page_of_run = f"/runs/{run_id}"
    problem = reason_problem(reason, "a rejection") if choice == "reject" else ""
    if problem:
        return back(page_of_run, f"reject refused: {problem}", "refused")
    client = client_for(request)
    who = person(request)
    try:
        decided = await to_thread.run_sync(
            lambda: client.decide_approval(
                run_id,
                step_key,
                approve=choice == "approve",
                reason=reason or None,
                identity=who,
            )
        )
    except NotFound as exc:
        raise HTTPException(404, str(exc)) from exc
    except RaraError as exc:  # WaitRefused: decided the other way, or not waiting
        return back(page_of_run, f"{choice} refused: {exc}", "refused")
    except psycopg.errors.InsufficientPrivilege as exc:  # not one of the gate's approvers
        return back(page_of_run, f"{choice} refused: {exc.diag.message_primary or exc}", "refused")
    note = f"{step_key} {decided.decision} by {decided.decided_by}"
    tone = decision_tone(decided.decision)
    return back(page_of_run, note if decided.recorded else f"{note} already", tone)


async def _suspend(request: Request, suspended: bool) -> Response:
    await authorised(request)
    name = str(request.path_params["name"])
    namespace = page_namespace(request)
    client = client_for(request, namespace)
    try:
        changed = await in_thread(lambda: client.suspend_schedule(name, suspended))
    except NotFound as exc:
        raise HTTPException(404, str(exc)) from exc
    except RaraError as exc:
        raise HTTPException(400, str(exc)) from exc
    done = "paused" if suspended else "resumed"
    if not changed:
        return back(schedule_href(namespace, name), f"already {done}", "info")
    return back(schedule_href(namespace, name), done, "done")


async def schedule_pause(request: Request) -> Response:
    return await _suspend(request, True)


async def schedule_resume(request: Request) -> Response:
    return await _suspend(request, False)


def _next(request: Request, value: str) -> str:
    return value if value.startswith("/") and not value.startswith("//") else "/runs"


async def login(request: Request) -> Response:
    auth = _auth(request)
    if request.method == "GET":
        return page(
            request, "login.html", next=_next(request, request.query_params.get("next", ""))
        )
    fields = await form(request)
    target = _next(request, fields.get("next", ""))
    origin = request.headers.get("origin")
    if origin is not None and origin.split("://", 1)[-1] != request.headers.get("host", ""):
        raise HTTPException(403, "login from another origin")
    holder = auth.check_token(fields.get("token", ""))
    if holder is None:
        return page(
            request,
            "login.html",
            status_code=401,
            next=target,
            error="wrong token" if auth.can_login else "no token is configured",
        )
    auth.sessions.end(request.cookies.get(SESSION_COOKIE, ""))  # a new login, a new session
    response = RedirectResponse(target, status_code=303)
    # Max-Age: the browser forgets the cookie when the server does.
    response.set_cookie(
        SESSION_COOKIE,
        auth.sessions.create(holder),
        max_age=int(auth.sessions.seconds),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


async def logout(request: Request) -> Response:
    """Ends the session on the server: the cookie is refused from now on, wherever a copy of
    it is (deleting it in this browser alone would not stop a copy)."""
    _auth(request).sessions.end(request.cookies.get(SESSION_COOKIE, ""))
    response = RedirectResponse("/runs", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response
