"""The registry of `es-broker admin` verbs, and the table and message fields they print.

The verb modules (cli/admin_topics, admin_offsets, admin_messages, admin_cluster,
admin_ops and admin_stats) register here with `verb` and `opt`; they print tables
with `table` and stored messages as mqadmin does (`message_fields`).
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

from es_broker.client.admin import Admin
from es_broker.timetravel.timeparse import format_time

Verb = Callable[[Admin, argparse.Namespace], Awaitable[Any]]
VERBS: dict[str, tuple[Verb, Callable[[Any], str], Callable[[argparse.ArgumentParser], None]]] = {}


def verb(name: str, render: Callable[[Any], str]):
    def register(fn):
        def options(p: argparse.ArgumentParser) -> None:
            for args, kwargs in getattr(fn, "options", []):
                p.add_argument(*args, **kwargs)

        VERBS[name] = (fn, render, options)
        return fn

    return register


def opt(*args, **kwargs):
    def add(fn):
        fn.options = [(args, kwargs), *getattr(fn, "options", [])]
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
