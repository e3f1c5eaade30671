"""A consumer's subscription checked and parsed: the pull's filter and CHECK_CLIENT_CONFIG's check.

A TAG expression becomes the set of tag hash codes it accepts (B-57); a SQL92
one (B-210..B-219) is compiled in a worker thread unless cached, and refused by
a broker with enablePropertyFilter=false (B-214); a bad one is answered as
B-215 says. What `pull.py` and `client_manage.py` (CHECK_CLIENT_CONFIG) share.
"""

from __future__ import annotations

import trio

from es_broker.commands import sql92
from es_broker.commands.errors import BrokerError
from es_broker.remoting import message as wire
from es_broker.remoting.codes import ResponseCode


def parse_subscription(
    expression: str | None, expression_type: str | None
) -> frozenset[int] | None:
    """A TAG expression -> the tag hash codes it accepts; None accepts every message."""
    if expression_type and expression_type.upper() != "TAG":
        raise BrokerError(
            f"The broker does not support consumer to filter message by {expression_type}",
            ResponseCode.SUBSCRIPTION_PARSE_FAILED,
        )
    text = (expression or "").strip()
    if text in ("", "*"):
        return None
    tags = [t.strip() for t in text.split("||") if t.strip()]
    if not tags:
        raise BrokerError(
            f"parse the consumer's subscription[{expression}] failed",
            ResponseCode.SUBSCRIPTION_PARSE_FAILED,
        )
    return frozenset(wire.tag_hash(t) for t in tags)


def is_tag_type(expression_type: str | None) -> bool:
    """A TAG subscription: no type, or TAG (es-broker takes it in any case)."""
    return not expression_type or expression_type.upper() == "TAG"


def property_filter_refusal(expression_type: str | None) -> BrokerError:
    """A SQL92 subscription on a broker with enablePropertyFilter=false (B-214)."""
    return BrokerError(
        f"The broker does not support consumer to filter message by {expression_type}",
        ResponseCode.SYSTEM_ERROR,
    )


async def compile_selector(text: str | None) -> sql92.Selector:
    """A SQL92 selector from the cache, else compiled in a worker thread (it is CPU work)."""
    found = sql92.cached_selector(text)
    if found is None:
        found = await trio.to_thread.run_sync(sql92.compile_selector, text)
    return found


def shortened(text: str, limit: int = 256) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
