"""Leader election of one broker group in etcd (Patroni's design; docs/semantics.md B-370..B-389).

Keys under `/es-broker/<cluster>/<brokerName>/`:

    leader            {"node", "addr", "epoch"}, on the leader's lease: the group's master
    epoch             the last epoch number (no lease; only a winning transaction raises it)
    epochs/<epoch>    {"epoch", "node", "addr", "start_seq", "old_leader", "old_acked"}: where
                      each epoch began (start_seq: its leader's last record when it took the key)
    acked             {"epoch", "seq"}: SYNC_MASTER's acknowledged sequence, published before the
                      answers it covers (no lease: it outlives the leader)
    members/<node>    {"addr", "broker_id"}, on the node's lease
    ids/<node>        the node's brokerId as a follower, allocated once (no lease)
    pos/<node>        {"seq", "vote"}, on the node's lease: its last record; `vote` is the epoch whose
                      leader it found gone (0 while it follows)

A campaign starts when the leader key is absent. Each node publishes its
position with vote = the current epoch, waits until every member did (or a
lease has passed), then only the best placed node (the longest log; the
smaller node id on a tie) whose log reaches the published acknowledged
sequence writes the leader key, in a transaction that compares: no leader
key, and no position, epoch or acked key changed since the snapshot it
decided on. The transaction raises the epoch and writes where it began.

A leader renews its lease every fifth of it; it takes writes only while its
last renewal, counted from when the renewal was sent, is younger than 60 %
of the lease, so it stops before the key can expire in etcd (`fence`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from es_broker.ha.etcd import Compare, EtcdClient, EtcdUnavailable, KeyValue, Put, prefix_end
from es_broker.remoting.peer_outcomes import LastingCondition, PeerRequests

log = logging.getLogger(__name__)

POLL = 0.05  # s between two reads of the group's keys while a campaign or a watch waits
RENEW_SHARE = 5  # renewals per lease
FENCE_SHARE = 0.6  # a leader writes while its last renewal is younger than this share of the lease


@dataclass(frozen=True, slots=True)
class Leadership:
    """Who leads the group in which epoch, as an election ended."""

    epoch: int
    node: str
    addr: str
    start_seq: int  # the leader's last record when it took the key
    old_leader: str
    old_acked: int
    mine: bool
    reason: str = "elected"


@dataclass(slots=True)
class GroupView:
    """One snapshot of the group's keys."""

    revision: int
    leader: dict[str, Any] | None
    leader_lease: int
    epoch: int
    epochs: dict[int, dict[str, Any]]
    acked: dict[str, Any]
    switch: dict[str, Any]
    members: dict[str, dict[str, Any]]
    positions: dict[str, dict[str, Any]]
    ids: dict[str, int]


def _json(kv: KeyValue) -> dict[str, Any]:
    try:
        value = json.loads(kv.value)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class Coordinator:
    """This node's side of its group's election; one per `es-broker serve` with ha_coordinator."""

    def __init__(
        self,
        etcd: EtcdClient,
        *,
        cluster: str,
        broker_name: str,
        node: str,
        lease_ms: int,
        sync: bool,
    ) -> None:
        if not node:
            raise ValueError("ha_coordinator needs ha_node_id (unique in the broker group)")
        self.etcd = etcd
        self.node = node
        self.sync = sync
        self.prefix = f"/es-broker/{cluster}/{broker_name}/".encode()
        self.ttl_s = max(2, math.ceil(lease_ms / 1000))
        self.lease = 0
        self.broker_id = 0  # this node's brokerId as a follower
        self.addr = ""  # set once the listener is bound
        self.position: Callable[[], int] = lambda: 0  # this node's last record
        self.renewed_at = -math.inf  # monotonic time a successful renewal was sent
        self.lease_lost = trio.Event()  # set when etcd answers that the lease expired
        self.leading: Leadership | None = None
        self.superseded = False  # a follower of a newer epoch fetched from this leader
        self.abstaining = (
            False  # handed the key over (haSwitch): no campaign until a leader is there
        )
        self.campaigning = False  # positions published now carry a vote
        self.switching = ""  # the follower a planned switch-over hands the key to
        self.leader_lease = -1  # the lease the leader key was written with
        self.requests = PeerRequests("request to etcd", log)
        # a best placed node whose log is below `acked`, looking again every POLL (B-372): logged
        # once, then at most once a minute, and when it ends
        self.below_acked = LastingCondition(log)
        self._acked_target = 0
        self._acked_published = 0
        self._acked_changed = trio.Event()
        self._acked_wanted = trio.Event()

    def key(self, *parts: str) -> bytes:
        return self.prefix + "/".join(parts).encode()

    @property
    def peer(self) -> str:
        return self.etcd.endpoints[0]

    async def _etcd(self, call: Any) -> Any:
        """Await an etcd call, noting its outcome (B-316); EtcdUnavailable propagates."""
        try:
            result = await call
        except EtcdUnavailable as exc:
            self.requests.no_answer(self.peer, exc)
            raise
        self.requests.ok(self.peer)
        return result

    # ------------------------------------------------------------------ membership and lease
    async def join(self, addr: str) -> None:
        """Take a lease, a brokerId and the member key; retried until etcd answers."""
        self.addr = addr
        while True:
            try:
                await self._join_once()
                return
            except EtcdUnavailable:
                await trio.sleep(POLL * 4)  # etcd not reachable yet: retried, logged by `requests`

    async def _join_once(self) -> None:
        self.lease = await self._etcd(self.etcd.grant(self.ttl_s))
        self.renewed_at = time.monotonic()
        self.lease_lost = trio.Event()
        self.broker_id = await self._allocate_id()
        member = json.dumps({"addr": self.addr, "broker_id": self.broker_id}).encode()
        await self._etcd(self.etcd.put(self.key("members", self.node), member, self.lease))
        await self.publish_position(vote=0)

    async def _allocate_id(self) -> int:
        while True:
            revision, kvs = await self._etcd(self.etcd.range(self.key("ids", ""), prefix=True))
            ids = {kv.key[len(self.key("ids", "")) :].decode(): int(kv.value) for kv in kvs}
            if self.node in ids:
                return ids[self.node]
            mine = max(ids.values(), default=0) + 1
            ids_key = self.key("ids", "")
            done = await self._etcd(
                self.etcd.txn(
                    [Compare(ids_key, "MOD", "LESS", revision + 1, prefix_end(ids_key))],
                    [Put(self.key("ids", self.node), str(mine).encode())],
                )
            )
            if done:
                return mine

    async def keep_alive(self) -> None:
        """Renew the lease every fifth of it; a lost lease is taken again (a new member key)."""
        while True:
            sent = time.monotonic()
            try:
                ttl = await self._etcd(self.etcd.keepalive(self.lease))
            except EtcdUnavailable:
                ttl = None
            if ttl == 0:
                if not self.lease_lost.is_set():
                    log.warning("ha: the lease of node %s expired in etcd", self.node)
                self.lease_lost.set()
                if self.abstaining:  # rejoins once the new leader is there (`elect`)
                    await trio.sleep(POLL)
                    continue
                with contextlib.suppress(EtcdUnavailable):
                    await self._join_once()
            elif ttl is not None:
                self.renewed_at = sent
            await trio.sleep(self.ttl_s / RENEW_SHARE)  # the renewal period; nothing waits on it

    def fence(self) -> str | None:
        """Why this node must not take writes now (None: it leads and its lease is fresh)."""
        lead = self.leading
        if lead is None:
            return "this broker does not hold its group's leader key"
        if self.lease != self.leader_lease:
            return f"the leader lease of epoch {lead.epoch} expired in etcd"
        if self.switching:
            return f"a switch-over to node {self.switching} is in progress"
        if self.superseded:
            return f"a follower of a newer epoch than {lead.epoch} reached this broker"
        if self.lease_lost.is_set():
            return f"the leader lease of epoch {lead.epoch} expired in etcd"
        age = time.monotonic() - self.renewed_at
        if age > self.ttl_s * FENCE_SHARE:
            return (
                f"the leader lease of epoch {lead.epoch} was last renewed {age:.1f} s ago "
                f"(etcd {', '.join(self.etcd.endpoints)} unreachable?)"
            )
        return None

    async def leave(self) -> None:
        """Revoke the lease (a clean stop): the leader key and member keys go at once."""
        if self.lease:
            with contextlib.suppress(EtcdUnavailable):
                await self._etcd(self.etcd.revoke(self.lease))

    # ------------------------------------------------------------------ positions and acks
    async def publish_position(self, *, vote: int) -> None:
        value = json.dumps({"seq": self.position(), "vote": vote}).encode()
        await self._etcd(self.etcd.put(self.key("pos", self.node), value, self.lease))

    async def follow_positions(self) -> None:
        """A follower's position, published when it changed (at most every POLL * 4 s)."""
        published = -1
        while True:
            seq = self.position()
            if seq != published and not self.campaigning:
                try:
                    await self.publish_position(vote=0)
                    published = seq
                except EtcdUnavailable:
                    pass
            await trio.sleep(POLL * 4)  # pacing; nothing waits on it

    async def publish_acked(self, seq: int, timeout: float) -> bool:
        """SYNC_MASTER: True once `acked` in etcd covers seq (published by one task, batched)."""
        if seq > self._acked_target:
            self._acked_target = seq
            self._acked_wanted.set()
        with trio.move_on_after(timeout):
            while self._acked_published < seq:
                await self._acked_changed.wait()
            return True
        return False

    async def acked_publisher(self, epoch: int) -> None:
        while True:
            await self._acked_wanted.wait()
            self._acked_wanted = trio.Event()
            target = self._acked_target
            value = json.dumps({"epoch": epoch, "seq": target}).encode()
            try:
                await self._etcd(self.etcd.put(self.key("acked"), value))
            except EtcdUnavailable:
                self._acked_wanted.set()
                await trio.sleep(POLL)  # retried while the waiters' deadline lasts
                continue
            if self.fence() is None:
                self._acked_published = max(self._acked_published, target)
                self._acked_changed.set()
                self._acked_changed = trio.Event()

    # ------------------------------------------------------------------ reading the group
    async def view(self) -> GroupView:
        revision, kvs = await self._etcd(self.etcd.range(self.prefix, prefix=True))
        v = GroupView(revision, None, 0, 0, {}, {}, {}, {}, {}, {})
        for kv in kvs:
            name = kv.key[len(self.prefix) :].decode()
            kind, _, rest = name.partition("/")
            if name == "leader":
                v.leader, v.leader_lease = _json(kv), kv.lease
            elif name == "epoch":
                v.epoch = int(kv.value or 0)
            elif name == "acked":
                v.acked = _json(kv)
            elif name == "switch":
                v.switch = _json(kv)
            elif kind == "epochs":
                v.epochs[int(rest)] = _json(kv)
            elif kind == "members":
                v.members[rest] = _json(kv)
            elif kind == "pos":
                v.positions[rest] = _json(kv)
            elif kind == "ids":
                v.ids[rest] = int(kv.value or 0)
        return v

    async def member_addrs(self) -> list[str]:
        """The addresses the group's members published (B-501: who may send the HA codes)."""
        return [str(m.get("addr", "")) for m in (await self.view()).members.values()]

    def leadership(self, v: GroupView) -> Leadership | None:
        if v.leader is None:
            return None
        epoch = int(v.leader.get("epoch", 0))
        began = v.epochs.get(epoch, {})
        return Leadership(
            epoch,
            str(v.leader.get("node", "")),
            str(v.leader.get("addr", "")),
            int(began.get("start_seq", 0)),
            str(began.get("old_leader", "")),
            int(began.get("old_acked", 0)),
            v.leader.get("node") == self.node and v.leader_lease == self.lease,
            str(began.get("reason", "elected")),
        )

    # ------------------------------------------------------------------ the campaign
    async def elect(self) -> Leadership:
        """Block until the group has a leader, taking the key when this node is the one to; retried on etcd failures."""
        self.campaigning = True
        try:
            while True:
                try:
                    return await self._elect_once()
                except EtcdUnavailable:
                    await trio.sleep(POLL * 4)  # etcd unreachable: retried, logged by `requests`
        finally:
            self.campaigning = False

    async def _elect_once(self) -> Leadership:
        began = time.monotonic()
        voted: tuple[int, int] | None = None  # (epoch voted in, position published)
        while True:
            v = await self.view()
            lead = self.leadership(v)
            if self.abstaining:
                if lead is None:
                    await trio.sleep(POLL)  # the next look: the follower named is campaigning
                    continue
                self.abstaining = False
                await self._join_once()
                continue
            if lead is not None:
                self.below_acked.ended(
                    f"ha: node {lead.node} leads epoch {lead.epoch}: node {self.node} waits no more"
                )
                if lead.node == self.node and not lead.mine:
                    # a former run of this node (killed) still holds the key: its lease is dead
                    log.info(
                        "ha: revoking the lease %d of a former run of %s", v.leader_lease, self.node
                    )
                    await self._etcd(self.etcd.revoke(v.leader_lease))
                    continue
                return lead
            seq = self.position()
            if voted != (v.epoch, seq):
                await self.publish_position(vote=v.epoch)
                voted = (v.epoch, seq)
                continue
            fresh = {
                n: int(p.get("seq", 0))
                for n, p in v.positions.items()
                if int(p.get("vote", -1)) == v.epoch
            }
            waiting = [n for n in v.members if n not in fresh]
            lease_passed = time.monotonic() - began > self.ttl_s
            if not waiting or lease_passed:
                best = min(fresh, key=lambda n: (-fresh[n], n))
                named = str(v.switch.get("to", ""))
                if (
                    int(v.switch.get("epoch", -1)) == v.epoch
                    and fresh.get(named, -1) >= fresh[best]
                ):
                    best = named  # a planned switch-over: the named follower, as caught up as any
                acked = int(v.acked.get("seq", 0))
                if best == self.node:
                    if seq < acked:
                        self.below_acked.holds(
                            f"ha: node {self.node} holds records up to {seq}, below the "
                            f"acknowledged {acked} of epoch {v.acked.get('epoch')}: it may not "
                            "lead; waiting for a node that holds them"
                        )
                    else:
                        self.below_acked.ended(
                            f"ha: node {self.node} holds records up to {seq}, the acknowledged "
                            f"{acked} included: it may lead"
                        )
                        reason = "switch_over" if v.switch.get("to") == self.node else "elected"
                        won = await self._take(v, seq, acked, reason)
                        if won is not None:
                            return won
                        continue
            await trio.sleep(POLL)  # the next look at the group's keys

    async def _take(self, v: GroupView, seq: int, acked: int, reason: str) -> Leadership | None:
        epoch = v.epoch + 1
        old = v.epochs.get(v.epoch, {})
        began = {
            "epoch": epoch,
            "node": self.node,
            "addr": self.addr,
            "start_seq": seq,
            "old_leader": str(old.get("node", "")),
            "old_acked": acked,
            "reason": reason,
        }
        pos = self.key("pos", "")
        compares = [
            Compare(self.key("leader"), "CREATE", "EQUAL", 0),
            Compare(pos, "MOD", "LESS", v.revision + 1, prefix_end(pos)),
            Compare(self.key("epoch"), "MOD", "LESS", v.revision + 1),
            Compare(self.key("acked"), "MOD", "LESS", v.revision + 1),
        ]
        leader = json.dumps({"node": self.node, "addr": self.addr, "epoch": epoch}).encode()
        puts = [
            Put(self.key("leader"), leader, self.lease),
            Put(self.key("epoch"), str(epoch).encode()),
            Put(self.key("epochs", f"{epoch:012d}"), json.dumps(began).encode()),
        ]
        sent = time.monotonic()
        if not await self._etcd(self.etcd.txn(compares, puts)):
            return None
        self.renewed_at = max(self.renewed_at, sent)  # the key was written on a live lease
        self.leader_lease = self.lease
        log.info(  # a fail-over doing its work: nothing for a person to do
            "ha: node %s took the leader key of epoch %d at record %d (old leader %s, acked %d)",
            self.node,
            epoch,
            seq,
            began["old_leader"] or "none",
            acked,
        )
        return Leadership(
            epoch, self.node, self.addr, seq, str(began["old_leader"]), acked, True, reason
        )

    async def until_changed(self, lead: Leadership) -> None:
        """Return once `lead` no longer holds: the leader key is gone or another's (a leader: its lease lost)."""
        while True:
            if lead.mine and (self.lease != self.leader_lease or self.superseded):
                return
            try:
                now = self.leadership(await self.view())
            except EtcdUnavailable:
                now = lead  # unknown: a leader's fence covers it, a follower keeps following
            if now is None or (now.node, now.epoch) != (lead.node, lead.epoch):
                return
            if lead.mine and not now.mine:
                return
            await trio.sleep(POLL * 2)  # the next look at the leader key

    def note_superseded(self, epoch: int) -> None:
        if self.leading is not None and epoch > self.leading.epoch and not self.superseded:
            log.warning("ha: a follower of epoch %d reached this leader of an older epoch", epoch)
            self.superseded = True

    async def step_down(self, lead: Leadership, to: str) -> bool:
        """Planned switch-over: hand the key to node `to` once it holds every record (True if done).

        The leader has fenced itself already; it gives up the key only if
        `to` published a position at its last record, then the follower's
        campaign finds it best placed.
        """
        v = await self.view()
        if to not in v.members:
            raise ValueError(
                f"node {to} is not a member of the group (members: {sorted(v.members)})"
            )
        seq = self.position()
        with trio.move_on_after(self.ttl_s * 2):
            while int(v.positions.get(to, {}).get("seq", -1)) < seq:
                await trio.sleep(POLL)  # the next look at the follower's published position
                v = await self.view()
            switch = json.dumps({"to": to, "epoch": lead.epoch}).encode()
            await self._etcd(self.etcd.put(self.key("switch"), switch))
            # the leader leaves the campaign: its lease (leader and member keys) goes at once
            self.abstaining = True
            await self._etcd(self.etcd.revoke(self.lease))
            self.lease = 0
            return True
        return False
