"""One run of a broker under the fail-over coordinator: its leadership and what it records (B-370..B-389)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from es_broker.commands.errors import IllegalRequest, ServiceNotAvailable
from es_broker.config import BrokerRole
from es_broker.core.broker import Broker
from es_broker.ha.election import Coordinator, Leadership
from es_broker.log import AppendContext
from es_broker.log.types import HaPromoted
from es_broker.net.channel import Channel
from es_broker.remoting.codes import ResponseCode
from es_broker.remoting.command import RemotingCommand, response_to
from es_broker.remoting.es_headers import HaSwitchRequestHeader, HaSwitchResponseHeader


@dataclass(slots=True)
class HaTerm:
    """The coordinator and the leadership a BrokerServer runs under (leader: `lead.mine`)."""

    coordinator: Coordinator
    lead: Leadership
    leader_role: BrokerRole  # the brokerRole a leader of the group takes

    async def record_promotion(self, broker: Broker) -> int:
        """The first record of the epoch: who took over from whom, at which record (B-372)."""
        lead = self.lead
        record = HaPromoted(
            epoch=lead.epoch,
            node=lead.node,
            addr=lead.addr,
            role=str(self.leader_role),
            old_leader=lead.old_leader,
            old_acked_seq=lead.old_acked,
            last_seq=lead.start_seq,
            reason=lead.reason,
        )

        def job(ctx: AppendContext) -> int:
            return ctx.append(record.to_record(broker.store.clock.now_ms()))

        return await broker.submit(job)

    async def switch(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """HA_SWITCH (`es-broker admin haSwitch`): stop writes, hand the key to `to` once it holds them all."""
        to = HaSwitchRequestHeader.of(req).to
        c = self.coordinator
        if not self.lead.mine or c.fence() is not None:
            raise ServiceNotAvailable(
                f"node {c.node} does not lead epoch {self.lead.epoch} now: {c.fence()}"
            )
        if to == c.node:
            raise IllegalRequest(f"node {to} leads already")
        c.switching = to
        try:
            done = await c.step_down(self.lead, to)
        except ValueError as exc:
            c.switching = ""
            raise IllegalRequest(str(exc)) from None
        if not done:
            c.switching = ""
            raise ServiceNotAvailable(
                f"node {to} did not reach record {c.position()} in time; node {c.node} leads on"
            )
        answer = HaSwitchResponseHeader(from_node=c.node, to=to)
        return response_to(req, ResponseCode.SUCCESS, None, answer.to_fields())

    def status(self) -> dict[str, Any]:
        c = self.coordinator
        return {
            "haNode": c.node,
            "haEpoch": self.lead.epoch,
            "haLeader": self.lead.node,
            "haLeaderAddr": self.lead.addr,
            "haFence": (c.fence() or "") if self.lead.mine else "follower",
            "haCoordinator": c.requests.state(),
            "haLeaseMs": c.ttl_s * 1000,
        }
