"""The note an action leaves on the page it redirects to, coloured by what it means.

An action answers with a redirect that carries its note (``?note=…``) and the note's tone
(``&tone=…``): ``done`` (green: it did what was asked, and that was good news: approved,
started, resumed, paused), ``stopped`` (red: something was stopped or turned down: a
rejection, a cancel), ``refused`` (red: the action did not happen, and why) and ``info``
(neutral: nothing changed, or nothing to colour). The tone is one of these words or the page
treats it as ``info``: a hand-typed URL can choose a colour, never markup, and never green for
a note that did not say which. One home for the rule: base.html reads ``tone_of``."""

from __future__ import annotations

from typing import Literal

from starlette.requests import Request
from starlette.responses import RedirectResponse

from rara.ui.links import with_param

Tone = Literal["done", "stopped", "refused", "info"]
TONES: tuple[Tone, ...] = ("done", "stopped", "refused", "info")


def back(path: str, note: str, tone: Tone) -> RedirectResponse:
    """A redirect to ``path`` (after a POST: 303) saying ``note`` in ``tone``."""
    return RedirectResponse(with_param(with_param(path, "note", note), "tone", tone), 303)


def tone_of(request: Request) -> Tone:
    """The tone the page's note is shown in: ``info`` unless the URL names a known one."""
    said = request.query_params.get("tone", "")
    for tone in TONES:
        if said == tone:
            return tone
    return "info"


def decision_tone(decision: str) -> Tone:
    """An approval's outcome: approved is good news; rejected (or timed out) stopped a run."""
    return "done" if decision == "approved" else "stopped"
