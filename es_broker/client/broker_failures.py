"""Brokers a request found dead, as the client instance remembers them (B-540, B-541).

A request that found no connection or no answer at a broker (refused, reset,
timed out) numbers that failure. A topic's route read before a failure of an
address it names is outdated: the producer reads it again before it chooses a
queue. Until the address answers a request again, producers prefer the queues
of other brokers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from es_broker.client.config import MASTER_ID
from es_broker.remoting.bodies import TopicRouteData


class BrokerFailures:
    """Failed broker addresses and, per topic, how many failures its route read had seen."""

    def __init__(self) -> None:
        # address -> the number of its last failure; present until it answers again
        self.failed: dict[str, int] = {}
        self._count = 0
        # topic -> the failures counted when its route was read
        self._route_read_at: dict[str, int] = {}

    def record(self, addr: str) -> None:
        self._count += 1
        self.failed[addr] = self._count

    def answered(self, addr: str) -> None:
        self.failed.pop(addr, None)

    def mark(self) -> int:
        """Taken before a route is asked for: failures after it outdate the answer."""
        return self._count

    def route_read(self, topic: str, mark: int) -> None:
        self._route_read_at[topic] = mark

    def outdated(self, topic: str, route: TopicRouteData | None) -> bool:
        """Whether an address of `route` failed after the topic's route was read."""
        if not self.failed or route is None:
            return False
        read_at = self._route_read_at.get(topic, 0)
        return any(
            self.failed.get(addr, 0) > read_at
            for data in route.broker_datas
            for addr in data.broker_addrs.values()
        )

    def names(self, broker_addrs: Mapping[str, Mapping[int, str]]) -> frozenset[str]:
        """The broker names whose master address failed and has not answered since."""
        if not self.failed:
            return frozenset()
        return frozenset(
            name
            for name, addrs in tuple(broker_addrs.items())
            if addrs.get(MASTER_ID) in self.failed
        )

    def keep_only(self, listed: Iterable[str]) -> None:
        """Forget addresses no route lists any more."""
        keep = set(listed)
        for addr in [a for a in self.failed if a not in keep]:
            del self.failed[addr]
