"""Group offsets administration over the wire: removal (B-34), clone (B-35), broker config (B-23)."""

from __future__ import annotations

from es_broker.remoting import fastjson
from es_broker.remoting.codes import RequestCode, ResponseCode


async def commit(running, group, topic, qid, offset):
    r = await running.call(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": group, "topic": topic, "queueId": qid, "commitOffset": offset},
    )
    assert r.code == 0


async def test_b034_delete_group_with_remove_offset_drops_every_offset_of_the_group(running):
    await running.create_topic("T", queues=2)
    await commit(running, "G", "T", 0, 5)
    await commit(running, "G", "T", 1, 7)
    await commit(running, "OTHER", "T", 0, 1)
    r = await running.call(
        RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "G", "removeOffset": True}
    )
    assert r.code == ResponseCode.SUCCESS
    broker = running.server.broker
    assert (broker.stored_offset("G", "T", 0), broker.stored_offset("G", "T", 1)) == (-1, -1)
    assert broker.stored_offset("OTHER", "T", 0) == 1
    with broker.store.read() as txn:
        (first, removed) = list(broker.store.offsets.changes(txn, "T", "G", 0))
    assert (removed.old, removed.new, removed.cause) == (5, -1, "group_deleted")


async def test_b034_delete_group_without_remove_offset_keeps_offsets(running):
    await running.create_topic("T", queues=1)
    await commit(running, "G", "T", 0, 5)
    await running.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "G"})
    assert running.server.broker.stored_offset("G", "T", 0) == 5


async def test_b035_clone_replaces_the_destination_queue_map(running):
    await running.create_topic("T", queues=3)
    await commit(running, "SRC", "T", 0, 10)
    await commit(running, "SRC", "T", 1, 11)
    await commit(running, "DST", "T", 2, 99)
    r = await running.call(
        RequestCode.CLONE_GROUP_OFFSET,
        {"srcGroup": "SRC", "destGroup": "DST", "topic": "T", "offline": True},
    )
    assert r.code == ResponseCode.SUCCESS
    broker = running.server.broker
    assert [broker.stored_offset("DST", "T", q) for q in range(3)] == [10, 11, -1]


async def test_b023_write_only_broker_shows_its_perm_on_every_topic_in_the_route(running):
    await running.create_topic("T", queues=2)
    r = await running.call(RequestCode.UPDATE_BROKER_CONFIG, {}, b"brokerPermission=2\n")
    assert r.code == ResponseCode.SUCCESS
    await running.server._register_all(running.client)
    from es_broker.remoting.command import request

    route = await running.client.invoke(
        running.namesrv_addr, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
    )
    assert fastjson.loads(route.body)["queueDatas"][0]["perm"] == 2


async def test_update_broker_config_refuses_keys_that_cannot_change_at_run_time(running):
    r = await running.call(RequestCode.UPDATE_BROKER_CONFIG, {}, b"listenPort=1\n")
    assert r.code == ResponseCode.SYSTEM_ERROR and "listenPort cannot be changed" in r.remark


async def test_end_transaction_of_no_half_message_is_refused_B225(running):
    r = await running.call(
        RequestCode.END_TRANSACTION,
        {
            "producerGroup": "P",
            "tranStateTableOffset": 0,
            "commitLogOffset": 0,
            "commitOrRollback": 8,
            "msgId": "m",
        },
    )
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert r.remark == "Find prepared transaction message failed"


async def test_b430_delete_group_with_remove_offsets_is_one_writer_job_and_history_shows_the_removal(
    broker, monkeypatch
):
    from es_broker.log.types import RecordType
    from es_broker.timetravel.query import TimeTravel
    from tests.conftest import make_topic

    await make_topic(broker, queues=2)
    await broker.update_group({"groupName": "G"}, requester="ops")
    await broker.commit_offset("G", "T", 0, 5, requester="c1")
    await broker.commit_offset("G", "T", 1, 7, requester="c1")
    jobs = []
    submit = broker.writer.submit

    async def counted(job):
        jobs.append(job)
        return await submit(job)

    monkeypatch.setattr(broker.writer, "submit", counted)
    seq = await broker.delete_group("G", requester="ops", remove_offsets=True)

    assert len(jobs) == 1  # one writer job, one transaction: never the group gone, offsets kept
    # since B-431 the job writes one record, the deletion holding the offsets it removed
    [(deleted_seq, deleted)] = list(broker.store.log.read(seq))
    assert (deleted_seq, deleted["type"]) == (seq, RecordType.SUBGROUP_DELETED)
    assert broker.group_config("G") is None
    assert (broker.stored_offset("G", "T", 0), broker.stored_offset("G", "T", 1)) == (-1, -1)
    # the history and the audit still say which offsets went, and why
    with broker.store.read() as txn:
        history = TimeTravel(broker.store).history(txn, "G", topic="T")
    gone = [
        (e.queue_id, e.old, e.new, e.cause, e.seq) for e in history if e.kind == "offset_removed"
    ]
    assert gone == [(0, 5, -1, "group_deleted", seq), (1, 7, -1, "group_deleted", seq)]


async def test_b430_delete_group_removes_offsets_of_a_group_without_a_config(broker):
    from tests.conftest import make_topic

    await make_topic(broker, queues=1)
    await broker.commit_offset("G", "T", 0, 5, requester="c1")
    assert broker.group_config("G") is None
    assert await broker.delete_group("G", requester="ops", remove_offsets=True) is None
    assert broker.stored_offset("G", "T", 0) == -1
