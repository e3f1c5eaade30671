"""The offset table, QUERY_CONSUMER_OFFSET (B-28, B-29, B-37, B-38, B-40), S-6, B-312 and B-480."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from es_broker.commands.offsets import QUERY_NOT_FOUND_REMARK
from es_broker.commands.placement import MessageIn
from es_broker.core.broker import Broker
from es_broker.log import GroupCommitWriter, RecordLog, make
from es_broker.log.arrival import ArrivalOrder
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, request
from es_broker.remoting.connection import Connection
from es_broker.remoting.pull_flags import PULL_COMMIT_OFFSET, PULL_SUBSCRIPTION, PULL_SUSPEND
from tests.conftest import make_topic


async def small_ram_broker(broker, tmp_path, clock, nursery, name: str, **switches) -> Broker:
    config = broker.config.replace(
        total_physical_memory_bytes=1000, storePathRootDir=str(tmp_path / name), **switches
    )
    b = Broker.open(config.storePathRootDir, config, clock)
    await nursery.start(b.run)
    await make_topic(b)
    return b


async def test_b028_commit_overwrites_lower_values_too(broker):
    await broker.commit_offset("G", "T", 0, 100)
    await broker.commit_offset("G", "T", 0, 90)
    assert broker.stored_offset("G", "T", 0) == 90


async def test_b028_negative_commit_is_stored_and_then_reads_as_no_offset(broker):
    await make_topic(broker)
    await broker.commit_offset("G", "T", 0, -5)
    assert broker.stored_offset("G", "T", 0) == -5
    answer = await broker.query_consumer_offset("G", "T", 0)
    assert answer.row == 2  # not row 1: -5 is "no offset"


async def test_b029_query_without_entry_is_minus_one(broker):
    assert broker.stored_offset("G", "T", 3) == -1


async def test_b037_row1_stored_offset_is_answered(broker):
    await make_topic(broker)
    await broker.commit_offset("G", "T", 0, 7)
    answer = await broker.query_consumer_offset("G", "T", 0)
    assert (answer.code, answer.offset, answer.row) == (ResponseCode.SUCCESS, 7, 1)


async def test_b037_row2_empty_queue_answers_zero(broker):
    await make_topic(broker)
    answer = await broker.query_consumer_offset("G", "T", 0)
    assert (answer.code, answer.offset, answer.row) == (ResponseCode.SUCCESS, 0, 2)


async def test_b037_row2_head_in_memory_answers_zero(broker):
    await make_topic(broker)
    for i in range(5):
        await broker.put_message("T", 0, MessageIn(b"%d" % i))
    answer = await broker.query_consumer_offset("G", "T", 0)
    assert (answer.code, answer.offset, answer.head_in_memory) == (ResponseCode.SUCCESS, 0, True)


async def test_b037_row3_head_on_disk_is_query_not_found(broker, tmp_path, clock, nursery):
    b = await small_ram_broker(broker, tmp_path, clock, nursery, "ondisk")
    await b.put_message("T", 0, MessageIn(b"first"))
    await b.put_message("T", 1, MessageIn(b"x" * 2000))  # other queues count too (B-38)
    answer = await b.query_consumer_offset("G", "T", 0)
    assert (answer.code, answer.offset, answer.row) == (ResponseCode.QUERY_NOT_FOUND, -1, 3)
    assert answer.remark == QUERY_NOT_FOUND_REMARK


async def test_b037_no_offset_answers_are_recorded_with_their_verdict(broker):
    await make_topic(broker)
    await broker.query_consumer_offset("G", "T", 0, requester="10.0.0.1@1")
    seq, record = list(broker.store.log.read())[-1]
    assert record["type"] == "offset_queried"
    assert (record["row"], record["offset"], record["requester"]) == (2, 0, "10.0.0.1@1")


def test_b038_in_memory_predicate_vector():
    from es_broker.config import BrokerConfig

    threshold = BrokerConfig(total_physical_memory_bytes=1000).in_memory_threshold
    assert threshold == 400
    phy_max = 10_000
    assert phy_max - 9_800 <= threshold  # p = 9 800: in memory
    assert phy_max - 9_000 > threshold  # p = 9 000: on disk


async def test_b040_new_group_on_young_topic_starts_at_zero(broker):
    await make_topic(broker)
    for i in range(500):
        await broker.put_message("T", 0, MessageIn(b"%d" % i))
    answer = await broker.query_consumer_offset("NEW", "T", 0)
    assert (answer.code, answer.offset) == (ResponseCode.SUCCESS, 0)


async def test_s006_strict_new_group_start_answers_not_found(broker, tmp_path, clock, nursery):
    b = await small_ram_broker(broker, tmp_path, clock, nursery, "strict", new_group_start="strict")
    await b.put_message("T", 0, MessageIn(b"x"))
    answer = await b.query_consumer_offset("NEW", "T", 0)
    assert answer.code == ResponseCode.QUERY_NOT_FOUND


async def test_b131_every_commit_is_in_the_history_with_cause_and_requester(broker):
    await broker.commit_offset("G", "T", 1, 10, requester="c1")
    await broker.commit_offset("G", "T", 1, 4, cause="admin", requester="ops")
    with broker.store.read() as txn:
        changes = list(broker.store.offsets.changes(txn, "T", "G", 1))
    assert [(c.old, c.new, c.cause, c.requester) for c in changes] == [
        (-1, 10, "client_commit", "c1"),
        (10, 4, "admin", "ops"),
    ]


async def test_b031_commit_piggybacked_on_pull_is_stored_with_its_cause(broker):
    await make_topic(broker)
    await broker.put_message("T", 0, MessageIn(b"x"))
    await broker.pull("G", "T", 0, 0, client="c1", commit_offset=1)
    with broker.store.read() as txn:
        (change,) = broker.store.offsets.changes(txn, "T", "G", 0)
    assert (change.new, change.cause) == (1, "pull_commit")


class Loopback:
    """One raw connection to a running broker: frames written together, answers read by opaque."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.out = Connection()
        self.answers = Connection()

    @classmethod
    async def open(cls, running) -> Loopback:
        host, port = running.addr.rsplit(":", 1)
        return cls(await trio.open_tcp_stream(host, int(port)))

    async def send_together(self, *commands: RemotingCommand) -> None:
        await self.stream.send_all(b"".join(self.out.send(c) for c in commands))

    async def next_answer(self) -> RemotingCommand:
        while not isinstance(answer := self.answers.next_event(), RemotingCommand):
            self.answers.receive_data(await self.stream.receive_some(65536))
        return answer


def _commit(offset: int, opaque: int) -> RemotingCommand:
    fields = {"consumerGroup": "G", "topic": "T", "queueId": 0, "commitOffset": offset}
    return request(RequestCode.UPDATE_CONSUMER_OFFSET, fields, opaque=opaque, oneway=True)


def _query(opaque: int) -> RemotingCommand:
    fields = {"consumerGroup": "G", "topic": "T", "queueId": 0}
    return request(RequestCode.QUERY_CONSUMER_OFFSET, fields, opaque=opaque)


def _pull(commit: int, opaque: int, *, suspend: bool = False) -> RemotingCommand:
    flags = PULL_COMMIT_OFFSET | PULL_SUBSCRIPTION | (PULL_SUSPEND if suspend else 0)
    fields = {
        "consumerGroup": "G",
        "topic": "T",
        "queueId": 0,
        "queueOffset": 0,
        "maxMsgNums": 32,
        "sysFlag": flags,
        "commitOffset": commit,
        "suspendTimeoutMillis": 60_000,
        "subscription": "*",
        "subVersion": 0,
        "expressionType": "TAG",
    }
    return request(RequestCode.PULL_MESSAGE, fields, opaque=opaque)


async def test_b312_a_query_right_after_a_oneway_commit_on_one_connection_answers_that_commit(
    running,
):
    """A consumer persists its offset oneway and asks for it at once (a reset, then a rebalance):
    the answer is the committed value, whatever order the two requests' tasks run in."""
    await running.create_topic("T", queues=1)
    conn = await Loopback.open(running)
    offsets = []
    for round_ in range(40):
        query = _query(2 * round_ + 2)
        await conn.send_together(_commit(round_ * 7, 2 * round_ + 1), query)
        answer = await conn.next_answer()
        assert answer.opaque == query.opaque
        offsets.append(int(answer.ext_fields["offset"]))
    await conn.stream.aclose()
    assert offsets == [round_ * 7 for round_ in range(40)]


async def test_b312_a_commit_after_a_pull_that_carries_one_is_stored_last(running):
    """A pull's piggybacked commit and the oneway commit sent after it on the same connection are
    stored in that order: the later, lower commit is the one that stays."""
    await running.create_topic("T", queues=1)
    conn = await Loopback.open(running)
    offsets = []
    for round_ in range(40):
        query = _query(3 * round_ + 3)
        await conn.send_together(
            _pull(1000 + round_, 3 * round_ + 1), _commit(round_, 3 * round_ + 2), query
        )
        while (answer := await conn.next_answer()).opaque != query.opaque:
            pass  # the pull's answer
        offsets.append(int(answer.ext_fields["offset"]))
    await conn.stream.aclose()
    assert offsets == list(range(40))
    with running.server.broker.store.read() as txn:
        changes = list(running.server.broker.store.offsets.changes(txn, "T", "G", 0))
    assert [c.new for c in changes][-2:] == [1039, 39]


async def test_b312_a_long_polling_pull_does_not_hold_back_the_commits_sent_after_it(running):
    """A pull held for new messages has stored its commit: a commit and a query sent after it are
    answered while it waits."""
    await running.create_topic("T", queues=1)
    conn = await Loopback.open(running)
    await conn.send_together(_pull(5, 1, suspend=True), _commit(9, 2), _query(3))
    answer = await conn.next_answer()
    assert (answer.opaque, answer.ext_fields["offset"]) == (3, "9")
    await conn.stream.aclose()


async def test_b312_settled_waits_for_the_jobs_queued_before_it_and_no_longer(tmp_path):
    log = RecordLog(tmp_path, sync=True)  # SYNC_FLUSH: commits run in the writer's thread
    writer = GroupCommitWriter(log)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        await writer.settled()  # nothing queued: at once
        for i in range(5):
            writer.enqueue(lambda ctx, i=i: ctx.append(make("probe", 0, value=i)))
        await writer.settled()
        assert log.last_seq == 5
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("suspend", "created", "queued"),
    [
        # a pull that long-polls (it reads nothing) queues its record as its frame is decoded and
        # waits as a task: the commit behind it queues at once
        (True, True, 2),
        # one that cannot long-poll queues its record as its frame is decoded: the commit behind
        # it queues at once
        (False, True, 2),
        # the group's first pull runs as a task holding the turn: its record waits in a held
        # commit, and the commit behind it waits for the pull's turn
        (True, False, 1),
    ],
    ids=["long-poll-recorded-as-decoded", "pull-served-as-decoded", "pull-holding-the-turn"],
)
async def test_b480_a_oneway_commit_behind_a_pull_is_stored_when_the_connection_closes(
    running, monkeypatch, suspend, created, queued
):
    """ali-ons on close: a oneway commit per queue, then the socket closed. A commit that arrived
    behind a pull of its connection (its record not yet committed) is stored, after the pull's,
    although the connection closes before either is committed."""
    await running.create_topic("T", queues=1)
    conn = await Loopback.open(running)
    if created:
        await conn.send_together(_pull(1, 1))  # the group's first pull creates it
        await conn.next_answer()
    writer = running.server.broker.writer
    held: list = []
    commit_now = writer._commit_now
    monkeypatch.setattr(writer, "_commit_now", held.append)  # group commits held back
    await conn.send_together(_pull(5, 2, suspend=suspend), _commit(9, 3))
    await trio.testing.wait_all_tasks_blocked()
    assert sum(len(batch) for batch in held) == queued
    await conn.stream.aclose()
    await trio.testing.wait_all_tasks_blocked()  # the listener saw the close and cancelled
    monkeypatch.setattr(writer, "_commit_now", commit_now)
    for batch in held:
        commit_now(batch)
    await writer.settled()
    with running.server.broker.store.read() as txn:
        changes = list(running.server.broker.store.offsets.changes(txn, "T", "G", 0))
    if created:
        assert [c.new for c in changes] == [1, 5, 9]
    else:  # the commit behind the pull is stored last
        assert [c.new for c in changes][-1] == 9


async def test_b480_a_ticketed_job_is_queued_though_its_task_is_cancelled_waiting_for_its_turn(
    tmp_path,
):
    """The writer's side of B-480: a cancelled submission still waiting for its turn is queued once
    the earlier ticket is released, in arrival order, and committed."""
    log = RecordLog(tmp_path)
    writer = GroupCommitWriter(log)
    order = ArrivalOrder()
    first, second = order.ticket(), order.ticket()

    async def submit(ticket, value: int) -> None:
        ticket.bind()
        await writer.submit(lambda ctx: ctx.append(make("probe", 0, value=value)))

    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        async with trio.open_nursery() as connection:
            connection.start_soon(submit, second, 2)
            await trio.testing.wait_all_tasks_blocked()  # waiting for the first ticket's turn
            connection.cancel_scope.cancel()  # the connection closes
            first.release()  # its holder, cancelled too, gives the turn up
        await writer.settled()
        assert log.last_seq == 1
        nursery.cancel_scope.cancel()
