"""Reading a request's ``extFields``: every value is text (``command`` turned JSON numbers into
their text), so one reader per kind. A missing or unreadable field is a ``BadField`` naming it;
the server answers it as a one-line error."""

from __future__ import annotations

import json

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


class BadField(ValueError):
    """A request field that is missing or not what it must be (the message names it)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


def text(ext: dict, name: str, *, default: str | None = None, required: bool = True) -> str | None:
    value = ext.get(name)
    if value is None or (value == "" and default is not None):
        if required and default is None:
            raise BadField(f"{name}: is missing")
        return default
    return value


def integer(ext: dict, name: str, *, default: int | None = None, lo: int = _I64_MIN, hi: int = _I64_MAX) -> int:
    value = ext.get(name)
    if value is None or value == "":
        if default is None:
            raise BadField(f"{name}: is missing")
        return default
    try:
        number = int(value)
    except ValueError:
        raise BadField(f"{name}: {value[:40]!r} is not an integer") from None
    if not lo <= number <= hi:
        raise BadField(f"{name}: {number} is not in {lo}..{hi}")
    return number


def boolean(ext: dict, name: str, default: bool = False) -> bool:
    value = ext.get(name)
    if value is None or value == "":
        return default
    return value.lower() == "true"


def json_body(body: bytes, what: str):
    """A request's JSON body, decoded (``BadField`` naming ``what`` when it is not JSON)."""
    if not body:
        raise BadField(f"{what}: the body is empty")
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadField(f"{what}: the body is not JSON ({str(exc)[:80]})") from None


__all__ = ["BadField", "boolean", "integer", "json_body", "text"]
