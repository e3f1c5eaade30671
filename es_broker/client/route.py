"""Topic routes as clients read them (B-23): publish and subscribe queue sets."""

from __future__ import annotations

import dataclasses

from es_broker.client.config import MASTER_ID
from es_broker.remoting.bodies import MessageQueue, TopicRouteData

PERM_READ = 4
PERM_WRITE = 2


def publish_queues(topic: str, route: TopicRouteData) -> tuple[MessageQueue, ...]:
    """Writable queues of brokers with a master, brokers in name order (topicRouteData2TopicPublishInfo)."""
    masters = {bd.broker_name for bd in route.broker_datas if MASTER_ID in bd.broker_addrs}
    out: list[MessageQueue] = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if qd.perm & PERM_WRITE and qd.broker_name in masters:
            out.extend(MessageQueue(topic, qd.broker_name, q) for q in range(qd.write_queue_nums))
    return tuple(out)


def subscribe_queues(topic: str, route: TopicRouteData) -> frozenset[MessageQueue]:
    """Readable queues 0..readQueueNums-1 of every broker (topicRouteData2TopicSubscribeInfo)."""
    return frozenset(
        MessageQueue(topic, qd.broker_name, q)
        for qd in route.queue_datas
        if qd.perm & PERM_READ
        for q in range(qd.read_queue_nums)
    )


def from_default_route(route: TopicRouteData, queue_nums: int) -> TopicRouteData:
    """The TBW102 route cut to the producer's defaultTopicQueueNums, used to auto-create a topic on send."""
    # Java takes both counts from the template's read queue count.
    queue_datas = tuple(
        dataclasses.replace(
            qd,
            read_queue_nums=min(queue_nums, qd.read_queue_nums),
            write_queue_nums=min(queue_nums, qd.read_queue_nums),
        )
        for qd in route.queue_datas
    )
    return dataclasses.replace(route, queue_datas=queue_datas)
