"""An orderly consumer in its own process, for tests/test_client_orderly.py.

`python -m tests.orderly_worker NAMESRV GROUP TOPIC NAME` consumes TOPIC with
our OrderlyPushConsumer and prints one JSON line per handler call:
{"ev": "consume", "name", "q", "offset", "key", "seq", "t0", "t1"} (t0/t1: wall
clock around the call), after {"ev": "started", "client_id"}. SIGTERM shuts it down
(then {"ev": "stopped"}); SIGKILL is a crash.
"""

from __future__ import annotations

import json
import signal
import sys
import time

import trio

from es_broker.client.config import ClientConfig, PushConsumerConfig
from es_broker.client.messages import ReceivedMessage
from es_broker.client.orderly import (
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    OrderlyConfig,
    OrderlyPushConsumer,
)

# fast timers; the client trusts a lock (2 s) less than the broker keeps it (its lockMaxLiveTime)
CONFIG = PushConsumerConfig(
    rebalance_interval=0.5,
    persist_consumer_offset_interval=1.0,
    persist_consumer_offset_delay=1.0,
    pull_time_delay_when_exception=0.2,
    broker_suspend_max_time_millis=1000,
    consumer_timeout_when_suspend=5.0,
)
ORDERLY = OrderlyConfig(
    lock_interval=0.5, lock_max_live=2.0, pull_delay_when_not_locked=0.2, relock_delay=0.2
)


def emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


async def main(namesrv: str, group: str, topic: str, name: str) -> None:
    async def handler(
        msgs: list[ReceivedMessage], context: ConsumeOrderlyContext
    ) -> ConsumeOrderlyStatus:
        for msg in msgs:
            t0 = time.time()
            await trio.sleep(0.002)  # a little work, so handler calls have a duration
            key, seq = msg.body.decode().split(":")
            emit(
                {
                    "ev": "consume",
                    "name": name,
                    "q": msg.queue.queue_id,
                    "offset": msg.queue_offset,
                    "key": key,
                    "seq": int(seq),
                    "t0": t0,
                    "t1": time.time(),
                }
            )
        return ConsumeOrderlyStatus.SUCCESS

    consumer = OrderlyPushConsumer(
        namesrv,
        group,
        handler,
        subscriptions={topic: "*"},
        config=CONFIG,
        orderly=ORDERLY,
        client_ip="127.0.0.1",
        instance_name=name,
        client_config=ClientConfig(heartbeat_broker_interval=1.0),
    )
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with consumer:
            emit({"ev": "started", "name": name, "client_id": consumer.client_id})
            async for _ in signals:
                break  # SIGTERM: shut down as an application would (unlock, persist)
    emit({"ev": "stopped", "name": name})


if __name__ == "__main__":
    trio.run(main, *sys.argv[1:5])
