"""A wire body as the plain JSON it was sent as, for whoever prints a body it decoded.

`es-broker admin --json` and the dashboard's /api/ pages print what the broker
answered; the admin client hands them the body classes (`bodies.py`,
`admin_bodies.py`, `query_bodies.py`), and `json.dumps(..., default=json_view)`
writes each one as the broker wrote it: fastjson's view for a Java-style body
(fields sorted, nulls left out), Python's for es-broker's own answers.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

from . import fastjson
from .bean import Bean
from .query_bodies import PythonJsonBean


def plain(body: Bean) -> Any:
    """The parsed JSON of `body`'s wire bytes."""
    if isinstance(body, PythonJsonBean):
        return json.loads(body.encode())
    return fastjson.loads(body.encode())


@runtime_checkable
class Viewed(Protocol):
    """An answer that is not one body (header fields, a body with the broker that sent it)."""

    def __json_view__(self) -> Any:
        """The plain JSON it is printed as."""
        ...


def json_view(value: object) -> Any:
    """`default=` of json.dumps: a body as its wire JSON, anything else as its text."""
    if isinstance(value, Bean):
        return plain(value)
    if isinstance(value, Viewed):
        return value.__json_view__()
    return str(value)
