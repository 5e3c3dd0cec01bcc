"""What the dashboard's lists share: a keyset page read with one row more than it shows, the
(namespace, name) cursor and its next page's query, and the namespace filter's options."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar
from urllib.parse import urlencode

from starlette.requests import Request

from rara.ui import data
from rara.ui.links import page_namespace

Row = TypeVar("Row")
NamedRow = TypeVar("NamedRow", bound="Named")


class Named(Protocol):
    """A row of a list by (namespace, name): a definition, a schedule, a release."""

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...


def one_page(rows: list[Row]) -> tuple[list[Row], bool]:
    """A keyset page read with one row more than it shows: its rows, and whether more follow."""
    return rows[: data.PAGE], len(rows) > data.PAGE


def offered(namespaces: list[str], chosen: str | None) -> list[str]:
    """The namespace select's options: those that exist, and the one asked for (a namespace
    with nothing in it yet is still a valid filter that matches nothing)."""
    return sorted({*namespaces, chosen}) if chosen else namespaces


def cursor(request: Request) -> data.Cursor | None:
    """The keyset cursor of a list by (namespace, name): ``after`` (a name) and
    ``after_namespace`` (``default`` when unsaid, as the links of before namespaces meant)."""
    after = request.query_params.get("after") or None
    if after is None:
        return None
    return data.Cursor(page_namespace(request, "after_namespace"), after)


def next_page(filters: dict[str, str], last: Named) -> str:
    """The query string of a (namespace, name) list's next page, its filters kept."""
    return urlencode({**filters, "after_namespace": last.namespace, "after": last.name})


def named_page(
    rows: list[NamedRow],
    request: Request,
    namespace: str | None,
    namespaces: list[str],
    filters: dict[str, str] | None = None,
) -> tuple[list[NamedRow], dict[str, Any]]:
    """A page of a (namespace, name) list, read with one row more than it shows: its rows,
    and what its template needs besides (the namespace filter, the next page's query, whether
    this is the first page). ``filters``: the page's filters to keep (default: the namespace)."""
    shown, more = one_page(rows)
    kept = filters if filters is not None else ({"namespace": namespace} if namespace else {})
    return shown, {
        "namespace": namespace,
        "namespaces": offered(namespaces, namespace),
        "next_page": next_page(kept, shown[-1]) if more else None,
        "first_page": request.query_params.get("after") is None,
    }
