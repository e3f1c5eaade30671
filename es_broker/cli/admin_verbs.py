"""The registry of `es-broker admin` verbs and the message fields they print.

`cli/admin.py` and `cli/admin_ops.py` both register verbs here with `verb` and
`opt`, and both print stored messages as mqadmin does (`message_fields`).
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
