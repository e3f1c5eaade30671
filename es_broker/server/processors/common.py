"""What several request processors share, each piece named for what it is.

The processors each take what they use in their constructor (`build.py` wires
them); the pieces more than one of them takes are here: who asked (`Requester`,
the client id a request is recorded under), the broker's settings as they are
now (`BrokerSettings`), a peer's address as a message's BORNHOST (`ipv4`), the
ACL read scope of admin and query reads (`ReadScope`, B-350, B-351), the one-way
notices to clients (`ClientNotices`, B-319), who is told of a stored send
(`StoredSends`: held pulls, the name server of a new topic), and when an offset
commit is answered under the fail-over coordinator (`CommitConfirmation`, B-376,
B-383). A piece one processor alone uses lives in that processor's module; the
subscription checks of a pull and of CHECK_CLIENT_CONFIG are `subscription.py`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import trio

from es_broker.acl.access import AccessControl, Scope
from es_broker.commands.placement import PutResult
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.ha.master import ReplicationMaster
from es_broker.net.channel import Channel, ChannelClosed
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, request, response_to
from es_broker.remoting.peer_outcomes import PeerRequests
from es_broker.remoting.response_headers import ConsumerGroupNoticeHeader
from es_broker.server.longpoll import PullHoldService

log = logging.getLogger(__name__)

#: the client id a request is recorded under (ClientRegistry.client_id)
Requester = Callable[[Channel], str]
#: told of topics to register with the name servers now (the changed ones; None: every topic)
TopicsChanged = Callable[[list[str]], object]


def ipv4(addr: tuple[str, int]) -> tuple[str, int]:
    """A peer address as a message's BORNHOST holds it (IPv4; an IPv6 peer as loopback)."""
    host = addr[0]
    if host.startswith("::ffff:"):
        host = host[7:]
    return (host if ":" not in host else "127.0.0.1", addr[1])


class BrokerSettings:
    """The `config` of a role processor: the broker's settings as they are now (read through the
    store's ConfigOwner, so a run-time change is seen at once)."""

    broker: Broker

    @property
    def config(self) -> BrokerConfig:
        # what `self.broker.config` answers, read in one step: a request reads it a few times
        return self.broker.store.settings.current


# ------------------------------------------------------------------ ACL
class ReadScope:
    """What a caller may read when the plain ACL limits it (B-350, B-351); no ACL: everything."""

    def __init__(self, access: AccessControl | None) -> None:
        self.access = access

    def limited(self, channel: Channel, req: RemotingCommand) -> Scope | None:
        """The caller's scope when ACL limits what it reads; None: it sees everything (B-351)."""
        if self.access is None:
            return None
        scope = self.access.scope(channel, req)
        return None if scope.sees_all else scope

    def refuse(
        self,
        channel: Channel,
        req: RemotingCommand,
        scope: Scope,
        what: str,
        *,
        action: str = "read",
        perm: str = "SUB",
    ) -> RemotingCommand:
        assert self.access is not None
        refusal = self.access.refuse_read(channel, req, scope, what, action=action, perm=perm)
        return response_to(req, refusal.code, refusal.remark)


# ------------------------------------------------------------------ to clients
class ClientNotices:
    """The one-way notices to clients (consumer ids changed, offset resets), and which were not
    written (B-319): `outcomes` is GET_BROKER_RUNTIME_INFO's clientNotice."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.outcomes = PeerRequests("notice to client", log)

    async def send_oneway(self, channel: Channel, command: RemotingCommand) -> None:
        """A one-way notice to a client: no answer comes; one that cannot be written is logged (B-319)."""
        try:
            await channel.invoke_oneway(command)
        except ChannelClosed as exc:
            self.outcomes.no_answer(channel.remote_addr, exc)
            return
        self.outcomes.ok(channel.remote_addr)

    def consumer_ids_changed(
        self, group: str, channels: Iterable[Channel], nursery: trio.Nursery
    ) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED to each member, unless the broker or the group turns it off."""
        group_config = self.broker.group_config(group)
        if not (
            self.broker.config.notifyConsumerIdsChangedEnable
            and (group_config is None or group_config.notify_consumer_ids_changed_enable)
        ):
            return
        notice = request(
            RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
            ConsumerGroupNoticeHeader(consumer_group=group),
            oneway=True,
        )
        for ch in channels:
            nursery.start_soon(self.send_oneway, ch, notice)


# ------------------------------------------------------------------ stored and replicated
class StoredSends:
    """Who waits on a stored send: held pulls of its queue, the name server of a new topic."""

    def __init__(self, holds: PullHoldService, on_topics_changed: TopicsChanged) -> None:
        self.holds = holds
        self.on_topics_changed = on_topics_changed

    def __call__(self, result: PutResult) -> None:
        self.holds.notify(result.topic, result.queue_id)
        if result.created_topic or result.diverted_from is not None:
            # a new topic, or maybe a new %DLQ%G, goes to the name server (that topic alone, B-391)
            self.on_topics_changed([result.topic])


class CommitConfirmation:
    """When an offset commit is answered: a leader in SYNC_MASTER under the fail-over coordinator
    answers once a follower holds its record and the published `acked` covers it, as a send
    (B-376, B-383); RocketMQ, and a master/slave pair without a coordinator, answer at once.

    `replication`: the master's replication in SYNC_MASTER, else None.
    """

    def __init__(self, replication: ReplicationMaster | None) -> None:
        self.replication = replication

    @property
    def at_once(self) -> bool:
        """Every commit is answered at once (no follower's confirmation to wait for)."""
        return self.replication is None or self.replication.publish_acked is None

    async def __call__(self, seq: int) -> ResponseCode:
        if self.replication is None or self.replication.publish_acked is None:
            return ResponseCode.SUCCESS
        code: ResponseCode = await self.replication.wait_replicated(seq)
        return code
