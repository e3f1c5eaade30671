"""RocketMQ 5's pop consumption in the broker core: pop, ack, change of invisible time, revive.

Each is a writer job of `es_broker.commands.pop*`; this class holds what they share: the
broker (its writer, and the group auto-creation a pull does too, B-03) and the data
directory's key that signs receipt handles (commands/pop_handles.py).
"""

from __future__ import annotations

from pathlib import Path

from es_broker.commands import pop, pop_ack, pop_handles, pop_revive
from es_broker.commands.errors import ServiceNotAvailable
from es_broker.commands.pop_ack import Changed, HandleUse
from es_broker.commands.pop_revive import RevivePass
from es_broker.core.broker import Broker
from es_broker.remoting.pop_headers import ReceiptHandle


class PopOperations:
    """The pop operations of one broker."""

    def __init__(self, broker: Broker, key: bytes | None = None) -> None:
        self.broker = broker
        self.key = key if key is not None else pop_handles.load_key(_data_dir(broker))

    async def pop(self, request: pop.PopRequest) -> pop.PopResult:
        """POP_MESSAGE: checked, the group created when allowed (B-03), then recorded."""
        store = self.broker.store
        with store.read() as txn:
            pop.check(store, txn, request)
        pop.check_group(await self.broker.ensure_group(request.group, requester=request.client))
        return await self.broker.submit(pop.pop_job(store, request))

    def handle(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        ck_offset: int,
        pop_time: int,
        invisible_time: int,
        order: bool,
        physical_offset: int,
    ) -> ReceiptHandle:
        """The receipt handle of one popped message (its POP_CK property)."""
        return pop_handles.make(
            self.key,
            group,
            topic,
            queue_id,
            offset,
            ck_offset=ck_offset,
            pop_time=pop_time,
            invisible_time=invisible_time,
            order=order,
            broker_name=self.broker.config.brokerName,
            physical_offset=physical_offset,
        )

    def use(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        extra_info: str,
        client: str,
        for_client: str | None = None,
    ) -> HandleUse:
        """An ack's or change's handle, its MAC checked (InvalidHandle: nothing recorded)."""
        handle = pop_handles.verify(self.key, group, topic, queue_id, offset, extra_info)
        return HandleUse(group, topic, queue_id, offset, handle.pop_time, client, for_client)

    @staticmethod
    def decoded(extra_info: str) -> ReceiptHandle:
        """The fields of a handle `use` accepted."""
        return ReceiptHandle.decode(extra_info)

    async def ack(self, use: HandleUse) -> int:
        """ACK_MESSAGE of a checked handle; the record's sequence number."""
        return await self.broker.submit(pop_ack.ack_job(self.broker.store, use))

    async def change(self, use: HandleUse, invisible_time: int) -> Changed:
        """CHANGE_MESSAGE_INVISIBLETIME of a checked handle: a new handle's times."""
        return await self.broker.submit(pop_ack.change_job(self.broker.store, use, invisible_time))

    async def revive(self) -> RevivePass:
        """One pass of the pop revive service; nothing while writes are refused (a full disk),
        nor while no invisible time has ended (a look in a read transaction)."""
        store = self.broker.store
        with store.read() as txn:
            next_due = store.pop.next_deadline(txn)
        now = store.clock.now_ms()
        if next_due is None or next_due > now:
            return RevivePass((), 0, next_due, now, False)
        try:
            return await self.broker.submit(pop_revive.revive_job(self.broker.store))
        except ServiceNotAvailable:
            now = self.broker.store.clock.now_ms()
            return RevivePass((), 0, None, now, False)


def _data_dir(broker: Broker) -> Path:
    return broker.store.log.path.parent  # the data directory (Store.open puts the log in lmdb/)
