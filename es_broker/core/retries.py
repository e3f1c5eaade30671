"""The broker core's retries, delays, dead letters and transactions (B-90..B-98, B-220..B-234, S-9).

RocketMQ spreads these over the send-back of SendMessageProcessor, the
ScheduleMessageService, the DLQ tools and the EndTransactionProcessor with its
check service; here they are the operations that give a message a second chance
or settle a half message, each a job for the writer.
"""

from __future__ import annotations

from typing import Any

from es_broker.commands import redrive, schedule, sendback, transaction
from es_broker.commands.errors import ServiceNotAvailable
from es_broker.config import BrokerRole
from es_broker.core.base import BrokerBase, Unrecorded


class RetryOperations(BrokerBase):
    """Send-back, delay delivery, re-drive and transactions; `Broker` adds the rest."""

    # ------------------------------------------------------------------ retry, delay, dead letters
    async def send_back(
        self,
        group: str,
        offset: int,
        delay_level: int = 0,
        *,
        max_reconsume_times: int | None = None,
        origin_msg_id: str | None = None,
        origin_topic: str | None = None,
        requester: str = "",
    ) -> sendback.SendBackResult:
        """CONSUMER_SEND_MSG_BACK (B-90..B-94): retry later through the delay schedule, or dead-letter."""
        result = await self.submit(
            sendback.send_back_job(
                self.store,
                group,
                offset,
                delay_level,
                max_reconsume_times=max_reconsume_times,
                origin_msg_id=origin_msg_id,
                origin_topic=origin_topic,
                requester=requester,
            )
        )
        if result.stored is not None and result.stored.real_topic is not None:
            self.on_delayed_stored()
        if result.error is not None:
            raise result.error
        return result

    async def deliver_delayed(self) -> schedule.DeliveryPass:
        """One pass of the delay schedule: due messages go to their real topic (B-97); never on a slave (B-98)."""
        if self.config.brokerRole == BrokerRole.SLAVE:
            return schedule.DeliveryPass((), 0, None, self.store.clock.now_ms())
        passed = await self._record_unless_full(schedule.deliver_due_job(self.store))
        if not isinstance(passed, Unrecorded):
            return passed
        # the disk is full: nothing delivered; the pass runs again when writes resume
        return schedule.DeliveryPass((), 0, None, self.store.clock.now_ms())

    def delay_offsets(self) -> dict[int, int]:
        """Level -> next schedule-queue offset to deliver (GET_ALL_DELAY_OFFSET, delayOffset.json)."""
        with self.store.read() as txn:
            return dict(self.store.schedule.cursors(txn))

    async def redrive_dlq(
        self,
        group: str,
        *,
        topic: str | None = None,
        target: str = redrive.TO_RETRY,
        max_count: int | None = None,
        dry_run: bool = False,
        requester: str = "",
    ) -> redrive.RedriveResult:
        """Re-send dead letters of a group (S-9); a dry run only lists them and records nothing."""
        if dry_run:
            with self.store.read() as txn:
                planned, more = redrive.plan(
                    self.store, txn, group, topic=topic, target=target, max_count=max_count
                )
            return redrive.RedriveResult(
                group, target, True, tuple(item for item, _ in planned), more
            )
        return await self.submit(
            redrive.redrive_job(
                self.store,
                group,
                topic=topic,
                target=target,
                max_count=max_count,
                requester=requester,
            )
        )

    # ------------------------------------------------------------------ transactions
    async def end_transaction(
        self, end: transaction.EndRequest, *, requester: str = ""
    ) -> transaction.EndResult:
        """END_TRANSACTION commit or rollback of a half message (B-222..B-225); never on a slave."""
        if self.config.brokerRole == BrokerRole.SLAVE:
            raise ServiceNotAvailable("service not available now. the broker is a slave")
        return await self.submit(transaction.end_job(self.store, end, requester))

    async def check_transactions(self, live: dict[str, list[str]]) -> transaction.CheckPass:
        """One pass of the transaction check (B-226..B-229): every check and discard recorded.

        live maps a producer group to the client ids connected now; while the
        disk is full nothing is checked (the pass runs again later).
        """
        now = self.store.clock.now_ms()
        if self.config.brokerRole == BrokerRole.SLAVE:
            return transaction.CheckPass((), 0, False, now)
        done = await self._record_unless_full(transaction.check_pass_job(self.store, live))
        if isinstance(done, Unrecorded):
            return transaction.CheckPass((), 0, False, now)
        return done

    def open_transactions(self, group: str | None = None) -> list[dict[str, Any]]:
        """The open transactions, optionally of one producer group (B-232)."""
        return transaction.open_transactions(self.store, group)
