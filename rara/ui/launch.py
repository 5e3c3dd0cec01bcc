"""Start a run from a definition's page: the POST of its form (rara.ui.launch_form, which
makes the run input of what was filled in). The start itself is ``Client.start_run``, what `rara
runs start` does, so the input is refused in the CLI's words (InputInvalid, the schemas'
problems named) and a capability no live worker serves too (CapabilityUnavailable), with a
"queue anyway" box. The POST needs what every action does (rara.ui.actions: not read-only,
an identity, the CSRF token), and runs under the key ``rara-ui:launch:<nonce>``, the nonce a
hidden field made with the form: a double submit of one form starts one run, a reload of the
page another. A refusal shows the page again with the form as it was filled in."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from rara.errors import CapabilityUnavailable, NotFound, RaraError
from rara.ui import pages
from rara.ui.actions import authorised, client_for, form, in_thread
from rara.ui.launch_form import NONCE, build_input, launch_fields
from rara.ui.links import page_namespace
from rara.ui.notes import back


@dataclass(frozen=True, slots=True)
class Refused:
    """A refused start, shown above the form filled in as it was."""

    message: str
    submitted: dict[str, str]
    unserved: bool  # no live worker serves a capability: "queue anyway" is the way on


async def start(request: Request) -> Response:
    """POST /definitions/NAME (?namespace=, the page's): start a run of the form's version."""
    await authorised(request)
    submitted = await form(request)
    nonce = submitted.get("nonce", "")
    if not NONCE.fullmatch(nonce):
        raise HTTPException(400, "the form's nonce is missing: reload the page")
    name = str(request.path_params["name"])
    namespace = page_namespace(request)
    try:
        version = int(submitted.get("version", ""))
    except ValueError:
        raise HTTPException(400, "version: the definition's version to start") from None
    client = client_for(request, namespace)
    try:
        spec = (await in_thread(lambda: client.get_definition(name, version=version)))["spec"]
        run_input = build_input(launch_fields(spec), submitted)
        started = await in_thread(
            lambda: client.start_run(
                name,
                version=version,
                input=run_input,
                idempotency_key=f"rara-ui:launch:{nonce}",
                queue_anyway=submitted.get("queue_anyway") == "on",
            )
        )
    except NotFound as exc:
        raise HTTPException(404, str(exc)) from exc
    except RaraError as exc:
        unserved = isinstance(exc, CapabilityUnavailable)
        request.state.launch_refused = Refused(str(exc), submitted, unserved)
        shown = await pages.definition_page(request)
        shown.status_code = 409 if unserved else 400
        return shown
    return back(
        f"/runs/{started.run_id}",
        f"run {started.run_id} of {name}@{version} started"
        + ("" if started.created else " (already started)"),
        "done" if started.created else "info",
    )
