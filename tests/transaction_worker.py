"""A transactional producer in its own process, for tests/test_transactions_restart.py.

`python -m tests.transaction_worker unknown NAMESRV GROUP TOPIC COUNT` sends COUNT
half messages (bodies `tx-0` ...) whose local transactions stay UNKNOW, answers
every check UNKNOW, and prints {"ev": "sent", "ids": [...]} once all are sent;
then it waits to be killed.

`python -m tests.transaction_worker commit NAMESRV GROUP` starts a producer of
the group that never sends; it prints {"ev": "started", "client_id"} once
started and {"ev": "checked", "body", "id", "times"} for every check it
answers, always COMMIT_MESSAGE. SIGTERM shuts it down (then {"ev": "stopped"});
SIGKILL is a crash.
"""

from __future__ import annotations

import json
import signal
import sys

import trio

from es_broker.client import Message, ReceivedMessage
from es_broker.client.transaction import LocalTransactionState, TransactionProducer

UNKNOW = LocalTransactionState.UNKNOW
COMMIT = LocalTransactionState.COMMIT_MESSAGE


def emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


async def leave_unknown(namesrv: str, group: str, topic: str, count: int) -> None:
    producer = TransactionProducer(
        namesrv, group, check_listener=lambda message: UNKNOW, client_ip="127.0.0.1"
    )
    async with producer:
        ids = []
        for i in range(count):
            result = await producer.send_in_transaction(
                topic, Message(f"tx-{i}".encode()), lambda message, sent, arg: UNKNOW
            )
            ids.append(result.msg_id)
        emit({"ev": "sent", "ids": ids})
        await trio.sleep_forever()


async def commit_checks(namesrv: str, group: str) -> None:
    def check(message: ReceivedMessage) -> LocalTransactionState:
        emit(
            {
                "ev": "checked",
                "body": message.body.decode(),
                "id": message.msg_id,
                "times": int(message.properties.get("TRANSACTION_CHECK_TIMES", "0")),
            }
        )
        return COMMIT

    producer = TransactionProducer(namesrv, group, check_listener=check, client_ip="127.0.0.1")
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with producer:
            emit({"ev": "started", "client_id": producer.instance.client_id})
            async for _ in signals:
                break
    emit({"ev": "stopped"})


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "unknown":
        trio.run(leave_unknown, args[0], args[1], args[2], int(args[3]))
    else:
        trio.run(commit_checks, args[0], args[1])
