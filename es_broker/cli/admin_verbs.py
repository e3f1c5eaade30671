"""The registry of `es-broker admin` verbs, and the table and message fields they print.

The verb modules (cli/admin_topics, admin_offsets, admin_messages, admin_cluster,
admin_ops and admin_stats) register here with `verb` and `opt`; they print tables
with `table` and stored messages as mqadmin does (`message_fields`).
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from es_broker.client.admin import Admin
from es_broker.timetravel.timeparse import format_time

Verb = Callable[[Admin, argparse.Namespace], Awaitable[object]]
V = TypeVar("V", bound=Verb)
# what a verb returned, as a human reads it; the same value is printed as JSON with --json.
# The registry holds verbs of every result type, so a renderer takes any: each is written
# beside its verb, against what that verb returns.
Render = Callable[[Any], str]
# add_argument's positional names and its keywords, passed through to argparse unchanged
Option = tuple[tuple[str, ...], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Registered:
    """One verb: the request it runs, how its result prints, the options it takes."""

    run: Verb
    render: Render
    options: tuple[Option, ...]

    def add_options(self, p: argparse.ArgumentParser) -> None:
        for args, kwargs in self.options:
            p.add_argument(*args, **kwargs)


VERBS: dict[str, Registered] = {}
# the options `opt` gave a verb function, until `verb` registers it (decorators run bottom-up)
_PENDING: dict[Verb, list[Option]] = {}


def verb(name: str, render: Render) -> Callable[[V], V]:
    """Register the decorated function as the verb `name`, printed with `render`."""

    def register(fn: V) -> V:
        VERBS[name] = Registered(fn, render, tuple(_PENDING.pop(fn, [])))
        return fn

    return register


def opt(*args: str, **kwargs: Any) -> Callable[[V], V]:
    """One argparse option of the verb below; options list top to bottom as written."""

    def add(fn: V) -> V:
        _PENDING.setdefault(fn, []).insert(0, (args, kwargs))
        return fn

    return add


def table(headers: list[str], rows: list[list[Any]]) -> str:
    widths = [max(len(str(x)) for x in [h, *[r[i] for r in rows]]) for i, h in enumerate(headers)]
    lines = ["  ".join(f"{h:<{w}}" for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(f"{str(c):<{w}}" for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def java_map(props: dict[str, str]) -> str:
    """Properties as mqadmin prints them (Java's Map.toString): {KEY=value, ...}."""
    return "{" + ", ".join(f"{k}={v}" for k, v in props.items()) + "}"


def message_fields(m: dict[str, Any]) -> list[tuple[str, Any]]:
    """The fields mqadmin prints of a stored message, from Topic to Properties, in its order."""
    return [
        ("Topic", m["topic"]),
        ("Tags", f"[{m['tags']}]"),
        ("Keys", f"[{m['keys']}]"),
        ("Queue ID", m["queueId"]),
        ("Queue Offset", m["queueOffset"]),
        ("CommitLog Offset", m["commitLogOffset"]),
        ("Reconsume Times", m["reconsumeTimes"]),
        ("Born Timestamp", format_time(m["bornTimestamp"])),
        ("Store Timestamp", format_time(m["storeTimestamp"])),
        ("Born Host", m["bornHost"]),
        ("Store Host", m["storeHost"]),
        ("System Flag", m["sysFlag"]),
        ("Properties", java_map(m["properties"])),
    ]
