"""The broker's request processors by role, built together: what `BrokerServer` serves.

As 4.9.8's BrokerController makes SendMessageProcessor, PullMessageProcessor,
ConsumerManageProcessor, ClientManageProcessor, QueryMessageProcessor,
AdminBrokerProcessor, EndTransactionProcessor and ReplyMessageProcessor,
`BrokerProcessors.build` makes one of each (and es-broker's retry, ACL,
time-travel, store and stats processors), each given in its constructor
what it uses, in the order their dependencies need: the send processor tells
the reply processor of every stored send, the reply processor tells held
pulls and the name server of a stored reply as a send does. Which request
code goes to which of them is the dispatch table of server/routes.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from es_broker.acl.access import AccessControl
from es_broker.commands.queue_locks import QueueLocks
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.ha.master import ReplicationMaster
from es_broker.server.clients import ClientRegistry
from es_broker.server.longpoll import PullHoldService
from es_broker.server.processors.acl import AclProcessors
from es_broker.server.processors.admin import AdminBrokerProcessor, Registered
from es_broker.server.processors.client_manage import ClientManageProcessor
from es_broker.server.processors.common import (
    ClientNotices,
    CommitConfirmation,
    ReadScope,
    StoredSends,
    TopicsChanged,
)
from es_broker.server.processors.consumer_manage import ConsumerManageProcessor
from es_broker.server.processors.end_transaction import EndTransactionProcessor
from es_broker.server.processors.pull import PullMessageProcessor
from es_broker.server.processors.query import QueryMessageProcessor
from es_broker.server.processors.reply import ReplyProcessors
from es_broker.server.processors.retry import RetryProcessors
from es_broker.server.processors.send import SendMessageProcessor
from es_broker.server.processors.stats import StatsProcessors
from es_broker.server.processors.store import StoreProcessors
from es_broker.server.processors.time_travel import TimeTravelProcessors


@dataclass(frozen=True, slots=True)
class BrokerProcessors:
    """One broker's processors, and the state they share with the server (locks, notices)."""

    broker: Broker
    send: SendMessageProcessor
    pull: PullMessageProcessor
    consumer_manage: ConsumerManageProcessor
    client_manage: ClientManageProcessor
    query_message: QueryMessageProcessor
    admin: AdminBrokerProcessor
    end_transaction: EndTransactionProcessor
    retry: RetryProcessors
    replies: ReplyProcessors
    time_travel: TimeTravelProcessors
    store: StoreProcessors
    stats: StatsProcessors
    acl: AclProcessors
    # orderly consumers' queue locks, in memory; owner changes are records (B-142..B-147)
    locks: QueueLocks
    # the one-way notices to clients (consumer ids changed, offset resets) not written (B-319)
    notices: ClientNotices

    @classmethod
    def build(
        cls,
        broker: Broker,
        clients: ClientRegistry,
        holds: PullHoldService,
        *,
        topics_changed: TopicsChanged,
        registered: Registered,
        ha_status: Callable[[], Mapping[str, object]],
        addr: Callable[[], str],
        access: AccessControl | None = None,
        replication: ReplicationMaster | None = None,
    ) -> BrokerProcessors:
        """The processors of `broker`.

        `topics_changed`: registers the topics a request created soon;
        `registered`: registers now and waits for it (admin changes);
        `ha_status`: replication state for GET_BROKER_RUNTIME_INFO;
        `addr`: the broker's address as it registers it (the ACL answers name it);
        `access`: the plain ACL when aclEnable (reads filtered, B-350, B-351);
        `replication`: the master's replication in SYNC_MASTER, else None.
        """
        requester = clients.client_id
        stored = StoredSends(holds, topics_changed)
        confirm = CommitConfirmation(replication)
        scope = ReadScope(access)
        notices = ClientNotices(broker)
        config = broker.config
        locks = QueueLocks(broker.submit, broker.store.clock, config.rebalanceLockMaxLiveTime)
        replies = ReplyProcessors(broker, clients, requester, stored)
        return cls(
            broker=broker,
            send=SendMessageProcessor(
                broker, requester, stored, on_sent=replies.note_sent, replication=replication
            ),
            pull=PullMessageProcessor(broker, clients, holds, requester, confirm),
            consumer_manage=ConsumerManageProcessor(broker, clients, requester, confirm),
            client_manage=ClientManageProcessor(broker, clients, locks, requester, topics_changed),
            query_message=QueryMessageProcessor(broker, scope),
            admin=AdminBrokerProcessor(
                broker, clients, requester, notices, scope, registered, ha_status
            ),
            end_transaction=EndTransactionProcessor(broker, holds, requester, scope),
            retry=RetryProcessors(broker, holds, requester, topics_changed, scope, clients),
            replies=replies,
            time_travel=TimeTravelProcessors(broker, access),
            store=StoreProcessors(broker),
            stats=StatsProcessors(broker, lambda: broker.config, clients),
            acl=AclProcessors(
                access,
                lambda: broker.store.clock.now_ms(),
                lambda: (broker.config.brokerClusterName, broker.config.brokerName, addr()),
            ),
            locks=locks,
            notices=notices,
        )

    @property
    def config(self) -> BrokerConfig:
        """The broker's settings as they are now (read through the store's ConfigOwner)."""
        return self.broker.config
