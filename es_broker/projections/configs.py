"""Topic and subscription-group configs: typed when read, camelCase maps when stored.

The records (`topic_updated`, `subgroup_updated`) and the two projections'
LMDB values hold a config as the map RocketMQ's JSON has always used
(`{"topicName": ..., "readQueueNums": ...}`, in the Bean's field order), and
those bytes never change: a replay rebuilds them byte for byte, and a data
directory written before reads as it is. Everything above the projections
reads the frozen Bean of `es_broker.remoting.bodies` (`TopicConfig`,
`SubscriptionGroupConfig`), converted here, once per stored value.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgpack

from es_broker.remoting.bodies import SubscriptionGroupConfig, TopicConfig

C = TypeVar("C", TopicConfig, SubscriptionGroupConfig)


@dataclass(frozen=True, slots=True)
class Versioned(Generic[C]):
    """A config and its RocketMQ `dataVersion`: the seq of the record that last changed it."""

    config: C
    data_version: int


def as_record(config: TopicConfig | SubscriptionGroupConfig) -> dict[str, Any]:
    """The config as records hold it: every field by its JSON name, in the Bean's order; a topic's
    RocketMQ 5 attributes only when it has some, so a topic without them keeps its bytes."""
    record = config.__fastjson__()
    if "attributes" in record and record["attributes"] is None:
        del record["attributes"]
    return record


# A stored value is immutable bytes and its conversion pure, so each is converted once: the send
# and pull paths read a config per request. Bounded: a broker holds thousands of topics at most.
@functools.lru_cache(maxsize=8192)
def stored_topic(raw: bytes) -> Versioned[TopicConfig]:
    """A topic projection's value, typed."""
    stored = msgpack.unpackb(raw)
    return Versioned(TopicConfig.from_json(stored), stored.get("dataVersion", 0))


@functools.lru_cache(maxsize=8192)
def stored_group(raw: bytes) -> Versioned[SubscriptionGroupConfig]:
    """A subscription-group projection's value, typed."""
    stored = msgpack.unpackb(raw)
    return Versioned(SubscriptionGroupConfig.from_json(stored), stored.get("dataVersion", 0))
