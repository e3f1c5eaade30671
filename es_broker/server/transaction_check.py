"""The transaction check service (4.9.8 TransactionalMessageCheckService, B-226..B-229): masters only.

Every `transactionCheckInterval` one pass of the core (`Broker.check_transactions`)
decides and records which open transactions are checked and which are
discarded; this service then sends each recorded check, CHECK_TRANSACTION_STATE
(code 39), one way to the producer channel the record names. A failed pass is
logged and the next one runs on time: the service never ends the broker.
A one-way request has no answer (4.9.8's Broker2Client sends it with
invokeOneway; the producer answers with END_TRANSACTION); a check that could
not be written is logged and shown in GET_BROKER_RUNTIME_INFO (B-319).
"""

from __future__ import annotations

import logging

import trio

from es_broker.commands.transaction import CheckSent
from es_broker.core.broker import Broker
from es_broker.log import WriterClosed
from es_broker.net.channel import Channel, ChannelClosed
from es_broker.remoting.codes import RequestCode
from es_broker.remoting.command import request
from es_broker.remoting.peer_outcomes import PeerRequests
from es_broker.server.clients import ClientRegistry

log = logging.getLogger(__name__)


class TransactionCheckService:
    def __init__(self, broker: Broker, clients: ClientRegistry) -> None:
        self.broker = broker
        self.clients = clients
        self.passes = 0
        self.checks_sent = 0
        # the checks this broker could not write, by producer address (B-319)
        self.checks = PeerRequests("transaction check to producer", log)

    def live_producers(self) -> tuple[dict[str, list[str]], dict[tuple[str, str], Channel]]:
        """Producer group -> client ids connected now, and the channel of each (group, client id)."""
        groups: dict[str, list[str]] = {}
        channels: dict[tuple[str, str], Channel] = {}
        for group, members in self.clients.producers.items():
            for channel, info in members.items():
                if channel.closed:
                    continue
                groups.setdefault(group, []).append(info.client_id)
                channels[(group, info.client_id)] = channel
        return groups, channels

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            # read each time: UPDATE_BROKER_CONFIG replaces the config object
            await trio.sleep(max(self.broker.config.transactionCheckInterval, 1) / 1000)
            try:
                more = await self.one_pass()
                while more:
                    more = await self.one_pass()
            except WriterClosed:
                return  # shutting down
            except Exception:  # a failed pass changes nothing; the next runs on time
                log.exception("transaction check pass failed")

    async def one_pass(self) -> bool:
        """Run one pass and send its checks; True when it stopped early with more to do."""
        groups, channels = self.live_producers()
        done = await self.broker.check_transactions(groups)
        self.passes += 1
        for check in done.checks:
            channel = channels.get((check.producer_group, check.client))
            if channel is not None:
                await self._send(channel, check)
        return done.more

    async def _send(self, channel: Channel, check: CheckSent) -> None:
        command = request(
            RequestCode.CHECK_TRANSACTION_STATE, check.header, check.body, oneway=True
        )
        try:
            await channel.invoke_oneway(command)
        except (ChannelClosed, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self.checks.no_answer(channel.remote_addr, exc)
            return
        self.checks.ok(channel.remote_addr)
        self.checks_sent += 1
