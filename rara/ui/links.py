"""Where the dashboard's pages are, now that names live in namespaces (migration 0017,
docs/ui.md): one place for the rule that every link and every page follows.

A definition's or a schedule's page is addressed by its name and ``?namespace=``; no
parameter means ``default``, so the URLs of before namespaces still name what they named.
On a list (runs, definitions, schedules), no ``?namespace=`` means every namespace. A link to
a list that means one namespace therefore always says which, ``default`` too."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from starlette.exceptions import HTTPException
from starlette.requests import Request

from rara.errors import InputInvalid
from rara.namespaces import DEFAULT_NAMESPACE, check_namespace

PARAMETER = "namespace"


def namespace_arg(request: Request, parameter: str = PARAMETER) -> str | None:
    """The namespace a query parameter names (None: absent or empty); 400 naming the
    parameter when it is not a namespace name, never a query that cannot match."""
    text = request.query_params.get(parameter, "").strip()
    if not text:
        return None
    try:
        return check_namespace(text, source=f"query parameter {parameter}:")
    except InputInvalid as exc:
        raise HTTPException(400, str(exc)) from None


def page_namespace(request: Request, parameter: str = PARAMETER) -> str:
    """The namespace of a definition's or a schedule's page (or of a list's keyset cursor):
    ``default`` when unsaid."""
    return namespace_arg(request, parameter) or DEFAULT_NAMESPACE


def _query(namespace: str, params: dict[str, object]) -> str:
    given = {k: v for k, v in params.items() if v is not None}
    if namespace != DEFAULT_NAMESPACE:
        given = {PARAMETER: namespace, **given}
    return "?" + urlencode(given) if given else ""


def definition_href(namespace: str, name: str, **params: object) -> str:
    """A definition's page (``version=``, ``a=``/``b=`` for a diff)."""
    return f"/definitions/{quote(name)}" + _query(namespace, params)


def schedule_href(namespace: str, name: str, action: str = "", **params: object) -> str:
    """A schedule's page, or its ``pause`` / ``resume`` action."""
    path = f"/schedules/{quote(name)}" + (f"/{action}" if action else "")
    return path + _query(namespace, params)


def release_href(namespace: str, name: str, **params: object) -> str:
    """A release's page (``number=`` for one of its releases other than the current one)."""
    return f"/releases/{quote(name)}" + _query(namespace, params)


def releases_href(namespace: str) -> str:
    """The releases list narrowed to a namespace (saying which, as runs_href does)."""
    return "/releases?" + urlencode({PARAMETER: namespace})


def runs_href(namespace: str, definition: str | None = None) -> str:
    """The runs list narrowed to a namespace (and a definition there): always says which
    namespace, since the list without one shows them all."""
    given = {PARAMETER: namespace, **({"definition": definition} if definition else {})}
    return "/runs?" + urlencode(given)


def with_param(href: str, name: str, value: str) -> str:
    """``href`` with one more query parameter (a note after an action; a space as %20)."""
    return href + ("&" if "?" in href else "?") + urlencode({name: value}, quote_via=quote)
