"""JSON pointers (RFC 6901) into an event's body: how a trigger says which part of a webhook's
payload becomes which run input field."""

from __future__ import annotations

from typing import Any

MAX_POINTER_LENGTH = 500


class PointerMissing(LookupError):
    """The document has nothing at the pointer; the message says where it stopped."""


def pointer_problem(pointer: str) -> str | None:
    """Why ``pointer`` is not a JSON pointer (None: it is)."""
    if len(pointer) > MAX_POINTER_LENGTH:
        return f"a JSON pointer of at most {MAX_POINTER_LENGTH} characters"
    if pointer and not pointer.startswith("/"):
        return f'{pointer!r} is not a JSON pointer ("" for the whole body, else starting with /)'
    for token in pointer.split("/")[1:]:
        if "~" in token.replace("~0", "").replace("~1", ""):
            return f"{pointer!r}: '~' is written '~0' in a JSON pointer ('~1' is '/')"
    return None


def resolve(document: Any, pointer: str) -> Any:
    """The value of ``document`` at ``pointer``; PointerMissing names the part not found."""
    value = document
    walked = ""
    for raw in pointer.split("/")[1:]:
        token = raw.replace("~1", "/").replace("~0", "~")
        walked += "/" + raw
        if isinstance(value, dict) and token in value:
            value = value[token]
        elif isinstance(value, list) and token.isdigit() and (token == "0" or token[0] != "0"):
            index = int(token)
            if index >= len(value):
                raise PointerMissing(f"{walked}: the list has {len(value)} items")
            value = value[index]
        else:
            raise PointerMissing(f"{walked}: not in the body")
    return value
