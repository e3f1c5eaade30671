"""Mixed RocketMQ load on raw wire frames, and the ledger of every acknowledgement it got.

Each worker has its own TCP connection and one request in flight at a time,
framed with `es_broker.remoting` (request, encode_frame, Connection), so an
operation counts as acknowledged exactly when the broker's answer was read.
Producers send single messages (SEND_MESSAGE_V2) and batches
(SEND_BATCH_MESSAGE); each consumer worker owns one group, and is the only one
to move its offsets: pulls (some with a piggybacked commit), commits
(UPDATE_CONSUMER_OFFSET), server-side resets (RESET_OFFSET 9101 and
INVOKE_BROKER_TO_RESET_OFFSET), send-backs of pulled messages
(CONSUMER_SEND_MSG_BACK) and offset queries. Because one worker serialises
every change of its group, the ledger knows what each offset must be after a
crash: the value of the last acknowledged change, or of the one in flight.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import trio

from es_broker.net.channel import next_opaque
from es_broker.remoting import fastjson
from es_broker.remoting import message as wire
from es_broker.remoting.codes import EsRequestCode, LanguageCode, RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, request
from es_broker.remoting.connection import CLOSED, NEED_DATA, Connection
from es_broker.remoting.frames import encode_frame
from es_broker.remoting.message import encode_batch
from es_broker.remoting.pull_flags import PullSysFlag

TOPIC = "CHAOS"
QUEUES = 4
CALL_TIMEOUT = 30.0  # a live broker answers far sooner; this only keeps a hung test finite
ANY = None  # an offset the ledger cannot predict (a reset by time in flight at the kill)
# pull answers that are given after the piggybacked commit was stored (Broker.pull records it first)
PULL_ANSWERED = {
    ResponseCode.SUCCESS,
    ResponseCode.PULL_NOT_FOUND,
    ResponseCode.PULL_RETRY_IMMEDIATELY,
    ResponseCode.PULL_OFFSET_MOVED,
}


class BrokerGone(Exception):
    """The connection ended without an answer: the request is neither acknowledged nor refused."""


class WireSession:
    """One TCP connection with one request in flight, framed by the sans-IO Connection."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.conn = Connection()

    @classmethod
    async def open(cls, addr: str) -> WireSession:
        host, _, port = addr.rpartition(":")
        return cls(await trio.open_tcp_stream(host, int(port)))

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def call(
        self,
        code: int,
        fields: dict[str, object],
        body: bytes = b"",
        language: LanguageCode = LanguageCode.JAVA,
    ) -> RemotingCommand:
        opaque = next_opaque()
        frame = encode_frame(request(code, fields, body, opaque=opaque, language=language))
        with trio.fail_after(CALL_TIMEOUT):
            try:
                await self.stream.send_all(frame)
                while True:
                    event = self.conn.next_event()
                    if event is NEED_DATA:
                        self.conn.receive_data(await self.stream.receive_some(1 << 16))
                    elif event is CLOSED:
                        raise BrokerGone(f"closed before answering code {code}")
                    elif event.is_response and event.opaque == opaque:
                        return event
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise BrokerGone(f"{type(exc).__name__} on code {code}") from None


@dataclass(frozen=True, slots=True)
class Sent:
    """An acknowledged message: where the broker said it stored it."""

    msg_id: str
    queue_id: int
    queue_offset: int
    body: bytes


@dataclass
class Ledger:
    """What the broker acknowledged, across every round."""

    sends: dict[tuple[int, int], Sent] = field(default_factory=dict)
    # every acknowledged offset change, (group, queue, new value), as a multiset: each must be in the history
    changes: Counter = field(default_factory=Counter)
    # (group, queue) -> the values its offset may hold now; -1 is "no offset"; ANY in the set: unpredictable
    possible: dict[tuple[str, int], set] = field(default_factory=dict)
    commits: int = 0
    resets: int = 0
    # (group, original msg id) -> acknowledged count
    send_backs: Counter = field(default_factory=Counter)
    pulled: int = 0
    delay_delivered: int = 0  # retries the broker delivered from the delay schedule, seen in traces
    cut: int = 0  # requests the kill left unanswered
    mismatches: list[str] = field(default_factory=list)
    # the kill switch: set once `acks` reaches `kill_at`
    acks: int = 0
    kill_at: int = 0
    reached: trio.Event = field(default_factory=trio.Event)

    def arm(self, after: int) -> trio.Event:
        self.kill_at = self.acks + after
        self.reached = trio.Event()
        return self.reached

    def ack(self) -> None:
        self.acks += 1
        if self.acks >= self.kill_at:
            self.reached.set()

    def changed(self, group: str, effects: dict[int, int]) -> None:
        """An acknowledged change: each queue now holds exactly its new value."""
        for q, value in effects.items():
            self.changes[(group, q, value)] += 1
            self.possible[(group, q)] = {value}
        self.ack()

    def maybe_changed(self, group: str, effects: dict[int, int | None]) -> None:
        """A change that was sent but not answered: it may or may not have happened."""
        for q, value in effects.items():
            self.possible.setdefault((group, q), {-1}).add(value)


class Producer:
    def __init__(self, name: str, rng: random.Random, ledger: Ledger) -> None:
        self.name, self.rng, self.ledger = name, rng, ledger
        self.count = 0

    def body(self) -> bytes:
        self.count += 1
        pad = self.rng.randrange(0, 1500)
        return f"{self.name}-{self.count}|".encode() + self.rng.randbytes(pad)

    async def run(self, session: WireSession) -> None:
        while True:
            q = self.rng.randrange(QUEUES)
            batch = self.rng.random() < 0.3
            bodies = [self.body() for _ in range(self.rng.randrange(2, 7) if batch else 1)]
            props = {"KEYS": self.name}
            fields: dict[str, object] = {
                "a": "CHAOS_PG",
                "b": TOPIC,
                "c": "TBW102",
                "d": QUEUES,
                "e": q,
                "f": 0,
                "g": 0,
                "h": 0,
                "i": wire.encode_properties(props).decode(),
                "j": 0,
                "k": False,
                "m": batch,
            }
            if batch:
                r = await session.call(
                    RequestCode.SEND_BATCH_MESSAGE,
                    fields,
                    encode_batch([(0, b, props) for b in bodies]),
                )
            else:
                r = await session.call(RequestCode.SEND_MESSAGE_V2, fields, bodies[0])
            if r.code != ResponseCode.SUCCESS:
                continue
            msg_ids = r.require_str("msgId").split(",")
            queue_id, first = r.require_int("queueId"), r.require_long("queueOffset")
            if len(msg_ids) != len(bodies):
                self.ledger.mismatches.append(
                    f"send of {len(bodies)} answered {len(msg_ids)} msg ids"
                )
            for i, (msg_id, body) in enumerate(zip(msg_ids, bodies, strict=False)):
                self.ledger.sends[(queue_id, first + i)] = Sent(msg_id, queue_id, first + i, body)
            self.ledger.ack()


class Consumer:
    """The only mover of its group's offsets: each change is acknowledged before the next one is sent."""

    def __init__(
        self, group: str, rng: random.Random, ledger: Ledger, positions: dict[int, int]
    ) -> None:
        self.group, self.rng, self.ledger = group, rng, ledger
        self.pos = dict(positions)  # queue -> next offset to pull
        self.recent: list[wire.StoredMessage] = []  # send-back candidates
        self.max: dict[int, int] = {q: 0 for q in range(QUEUES)}

    async def run(self, session: WireSession) -> None:
        actions = (
            [self.pull] * 9
            + [self.commit] * 6
            + [self.send_back] * 3
            + [self.reset] * 1
            + [self.invoke_reset] * 1
            + [self.query] * 1
        )
        while True:
            await self.rng.choice(actions)(session)

    async def change(
        self,
        session: WireSession,
        effects: dict[int, int | None],
        code: int,
        fields: dict[str, object],
        language: LanguageCode = LanguageCode.JAVA,
        answered: Iterable[int] = (ResponseCode.SUCCESS,),
    ) -> RemotingCommand | None:
        """Send an offset-changing request; the ledger learns its effect only from the answer."""
        try:
            r = await session.call(code, fields, language=language)
        except BrokerGone:
            self.ledger.maybe_changed(self.group, effects)
            raise
        if r.code not in set(answered):
            self.ledger.maybe_changed(self.group, effects)
            return None
        return r

    async def pull(self, session: WireSession) -> None:
        q = self.rng.randrange(QUEUES)
        offset = self.pos.get(q, 0)
        piggyback = self.rng.random() < 0.3
        fields = {
            "consumerGroup": self.group,
            "topic": TOPIC,
            "queueId": q,
            "queueOffset": offset,
            "maxMsgNums": 16,
            "sysFlag": PullSysFlag.build(subscription=True, commit_offset=piggyback),
            "commitOffset": offset if piggyback else 0,
            "suspendTimeoutMillis": 0,
            "subscription": "*",
            "subVersion": 0,
            "expressionType": "TAG",
        }
        effects = {q: offset} if piggyback else {}
        r = await self.change(
            session, effects, RequestCode.PULL_MESSAGE, fields, answered=PULL_ANSWERED
        )
        if r is None:
            return
        if piggyback:
            self.ledger.commits += 1
            self.ledger.changed(self.group, effects)
        else:
            self.ledger.ack()
        self.max[q] = r.get_long("maxOffset", self.max[q]) or 0
        if r.code == ResponseCode.SUCCESS:
            for m in wire.decode_all(r.body):
                self.check_pulled(m, q)
                self.recent.append(m)
            del self.recent[:-32]
        self.pos[q] = r.get_long("nextBeginOffset", offset)

    def check_pulled(self, m: wire.StoredMessage, q: int) -> None:
        self.ledger.pulled += 1
        sent = self.ledger.sends.get((q, m.queue_offset))
        if m.topic != TOPIC or m.queue_id != q:
            self.ledger.mismatches.append(
                f"pull of q{q} gave {m.topic} q{m.queue_id}/{m.queue_offset}"
            )
        elif sent is not None and (sent.body != m.body or sent.msg_id != m.msg_id):
            self.ledger.mismatches.append(
                f"pull of q{q}/{m.queue_offset}: not the acknowledged message"
            )

    async def commit(self, session: WireSession) -> None:
        q = self.rng.randrange(QUEUES)
        value = self.pos.get(q, 0)
        if self.rng.random() < 0.2:
            value = max(0, value - self.rng.randrange(1, 4))  # an overwrite backwards (B-28)
        fields = {"consumerGroup": self.group, "topic": TOPIC, "queueId": q, "commitOffset": value}
        if (
            await self.change(session, {q: value}, RequestCode.UPDATE_CONSUMER_OFFSET, fields)
            is not None
        ):
            self.ledger.commits += 1
            self.ledger.changed(self.group, {q: value})

    async def reset(self, session: WireSession) -> None:
        """es-broker's RESET_OFFSET, server side: the answer's per-queue `final` is the new offset."""
        kind = self.rng.choice(["earliest", "latest", "offset", "shift"])
        value = {
            "offset": self.rng.randrange(0, max(self.max.values()) + 1),
            "shift": self.rng.randrange(-5, 3),
        }.get(kind, 0)
        fields = {
            "group": self.group,
            "topic": TOPIC,
            "kind": kind,
            "value": value,
            "isForce": True,
            "dryRun": False,
            "mode": "server_side",
            "scope": "read_queues",
        }
        r = await self.change(session, self.unknown(), EsRequestCode.RESET_OFFSET, fields)
        if r is not None:
            self.applied({row["queueId"]: row["final"] for row in json.loads(r.body)["queues"]})

    async def invoke_reset(self, session: WireSession) -> None:
        """RocketMQ's INVOKE_BROKER_TO_RESET_OFFSET; reset_mode=server_side moves the offsets itself."""
        timestamp = self.rng.choice([0, -1])  # every queue's first message, or its max
        fields = {"topic": TOPIC, "group": self.group, "timestamp": timestamp, "isForce": True}
        # a C++ client is answered the offset table as a list (docs/protocol.md §9.6)
        r = await self.change(
            session,
            self.unknown(),
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
            fields,
            language=LanguageCode.CPP,
        )
        if r is not None:
            self.applied({e["queueId"]: e["offset"] for e in fastjson.loads(r.body)["offsetTable"]})

    def unknown(self) -> dict[int, int | None]:
        return dict.fromkeys(range(QUEUES), ANY)

    def applied(self, table: dict[int, int]) -> None:
        self.ledger.resets += 1
        self.pos.update(table)
        self.ledger.changed(self.group, table)

    async def send_back(self, session: WireSession) -> None:
        if not self.recent:
            return await self.pull(session)
        m = self.rng.choice(self.recent)
        level = self.rng.choice([-1, 1, 2, 3])  # -1: straight to %DLQ%G
        r = await session.call(
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {
                "group": self.group,
                "offset": m.physical_offset,
                "delayLevel": level,
                "originMsgId": m.msg_id,
                "originTopic": TOPIC,
                "maxReconsumeTimes": 16,
                "unitMode": False,
            },
        )
        if r.code == ResponseCode.SUCCESS:
            self.ledger.send_backs[(self.group, m.msg_id)] += 1
            self.ledger.ack()

    async def query(self, session: WireSession) -> None:
        q = self.rng.randrange(QUEUES)
        r = await session.call(
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": self.group, "topic": TOPIC, "queueId": q},
        )
        expected = self.ledger.possible.get((self.group, q))
        if expected and -1 in expected:
            # no stored offset: B-37 answers 0 while the queue head is in memory
            expected = expected | {0}
        if (
            r.code == ResponseCode.SUCCESS
            and expected
            and ANY not in expected
            and r.require_long("offset") not in expected
        ):
            self.ledger.mismatches.append(
                f"live query {self.group} q{q} = {r.require_long('offset')}, "
                f"expected one of {sorted(expected)}"
            )
        self.ledger.ack()


async def run_worker(addr: str, worker: Producer | Consumer) -> None:
    """Run until the broker goes away; the request in flight then stays unacknowledged."""
    session = await WireSession.open(addr)
    try:
        await worker.run(session)
    except BrokerGone:
        worker.ledger.cut += 1
    finally:
        await session.aclose()
