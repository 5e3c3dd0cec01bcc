"""Templates (Jinja2, autoescaped: every name, key and message is text, never markup) and the
small formatting filters they use."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse

from rara.namespaces import qualified
from rara.ui.auth import AuthConfig
from rara.ui.decisions import gate_rejected
from rara.ui.links import (
    definition_href,
    release_href,
    releases_href,
    runs_href,
    schedule_href,
)
from rara.ui.nav import shown
from rara.ui.notes import tone_of
from rara.ui.numbers import metric, number, size
from rara.waits import run_waiting_for

TEMPLATES = Path(__file__).parent / "templates"


def when(value: datetime | None) -> str:
    if value is None:
        return ""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def took(start: datetime | None, end: datetime | None, now: datetime | None = None) -> str:
    """Duration from ``start`` to ``end`` (or ``now``): 0.42s, 1m05s, 2h03m."""
    if start is None or (end or now) is None:
        return ""
    seconds = max(((end or now) - start), timedelta()).total_seconds()  # type: ignore[operator]
    if seconds < 60:
        return f"{seconds:.2f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def iso(value: datetime | None) -> str:
    """The instant for the page's scripts (UTC, ISO 8601): what they count from."""
    return "" if value is None else value.astimezone(UTC).isoformat()


def stamp(value: datetime | str | None) -> Markup:
    """The dashboard's one way to show an instant: UTC, named, and a relative time the page
    keeps current (``3 min ago``; app.js). A string is an instant as JSON holds it (ISO 8601:
    a waiting run's due time, rara_run_phase)."""
    if value is None:
        return Markup("")
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return Markup('<time datetime="{}" data-rel>{} UTC</time>').format(iso(value), when(value))


def ticking(start: datetime | None, end: datetime | None, now: datetime) -> str:
    """``took`` that the page keeps counting while there is no end yet (run.js)."""
    text = took(start, end, now)
    if start is None or end is not None:
        return text  # plain text: the template escapes it
    return Markup('<span class="took" data-start="{}">{}</span>').format(iso(start), text)


def short(digest: str) -> str:
    return digest[7:19] + "…" if digest.startswith("sha256:") else digest


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


# What one block of JSON or text on a page shows at most (a run's input, a step's result, an
# error's details or traceback); the rest is counted, not sent: a page's size is bounded by
# what it lists, not by what a step or a caller wrote (docs/ui.md, "Big values").
SHOWN_BYTES = 16 * 1024


def clip(text: Any, limit: int = SHOWN_BYTES) -> tuple[str, int]:
    """``text`` cut to at most ``limit`` bytes of UTF-8 (never inside a character), and how
    many bytes were left out (0: all of it): for ``… N more bytes``."""
    encoded = str(text).encode()
    if len(encoded) <= limit:
        return str(text), 0
    head = encoded[:limit].decode(errors="ignore")
    return head, len(encoded) - len(head.encode())


def cut(text: Any, limit: int = 2000) -> str:
    """One line of text (an error's message) cut at ``limit`` bytes, saying how much more."""
    head, more = clip(text, limit)
    return f"{head} … {more} more bytes" if more else head


def compact(value: Any) -> str:
    """JSON on one line, as text (the template escapes it; unlike ``tojson``, which is for
    scripts, a ``<`` shows as itself): run.js indents it when it is opened."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


ENV = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.filters.update(
    when=when, size=size, short=short, pretty=pretty, compact=compact, iso=iso, stamp=stamp
)
ENV.filters.update(clip=clip, cut=cut, number=number)
ENV.filters["metric"] = lambda value, name: metric(name, value)  # {{ value|metric(name) }}
ENV.globals.update(
    took=took,
    ticking=ticking,
    definition_href=definition_href,
    schedule_href=schedule_href,
    runs_href=runs_href,
    release_href=release_href,
    releases_href=releases_href,
    note_tone=tone_of,
    gate_rejected=gate_rejected,
    qualified=qualified,
    run_waiting_for=run_waiting_for,
)


def page(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    auth: AuthConfig = request.app.state.config.auth
    html = ENV.get_template(template).render(
        request=request,
        path=request.url.path,
        auth=auth,
        may_act=auth.may_act(request),
        identity=auth.identity(request),
        csrf=auth.csrf_token(request),
        # Gates waiting for a decision the viewer can see (rara.ui.nav), on Approvals.
        open_approvals=shown(getattr(request.state, "open_approvals", None)),
        **context,
    )
    return HTMLResponse(html, status_code=status_code)
