"""Transactional messages in the broker core, on a manual clock (B-220..B-231)."""

from __future__ import annotations

import pytest

from es_broker.commands import transaction as tx
from es_broker.commands.errors import BrokerError, NoPermission
from es_broker.commands.placement import MessageIn
from es_broker.remoting import message as wire
from es_broker.remoting.codes import RequestCode, ResponseCode
from tests.conftest import START, make_topic

GROUP = "PG"


def half_message(body: bytes = b"order-1", **props: str) -> MessageIn:
    properties = {"TRAN_MSG": "true", "PGROUP": GROUP, "UNIQ_KEY": "U" + body.decode(), **props}
    return MessageIn(body, properties, sys_flag=tx.TRANSACTION_PREPARED_TYPE, born_timestamp=START)


def end_of(result, kind: int, *, from_check: bool = False) -> tx.EndRequest:
    return tx.EndRequest(
        GROUP, result.queue_offset, result.physical_offsets[0], kind, from_check, "m"
    )


async def test_half_message_is_stored_in_the_half_topic_not_the_real_queue_B220(broker):
    await make_topic(broker, "T", 4)
    result = await broker.put_message("T", 2, half_message())
    assert result.topic == tx.HALF_TOPIC and result.answer_queue_id == 2
    assert broker.max_offset("T", 2) == 0
    assert broker.max_offset(tx.HALF_TOPIC, 0) == 1
    stored = wire.decode_one(broker.message_at(result.physical_offsets[0]))[0]
    assert stored.properties["REAL_TOPIC"] == "T" and stored.properties["REAL_QID"] == "2"
    assert stored.sys_flag & tx.TRANSACTION_ROLLBACK_TYPE == tx.TRANSACTION_NOT_TYPE
    (row,) = broker.open_transactions(GROUP)
    assert row["topic"] == "T" and row["queueId"] == 2 and row["checks"] == 0


async def test_commit_stores_a_visible_copy_with_the_prepared_offset_B223(broker):
    await make_topic(broker, "T", 4)
    result = await broker.put_message("T", 1, half_message(TAGS="a"))
    done = await broker.end_transaction(end_of(result, tx.TRANSACTION_COMMIT_TYPE))
    assert done.state == "committed" and done.stored is not None
    got = broker.get_message("T", 1, 0, 32)
    (raw,) = got.messages
    msg = wire.decode_one(raw)[0]
    assert msg.body == b"order-1" and msg.topic == "T" and msg.queue_id == 1
    assert msg.prepared_transaction_offset == result.physical_offsets[0]
    assert msg.sys_flag & tx.TRANSACTION_ROLLBACK_TYPE == tx.TRANSACTION_COMMIT_TYPE
    for gone in ("REAL_TOPIC", "REAL_QID", "TRAN_MSG"):
        assert gone not in msg.properties
    assert msg.properties["PGROUP"] == GROUP and msg.properties["UNIQ_KEY"] == "Uorder-1"
    assert msg.properties["TAGS"] == "a"
    assert broker.open_transactions() == []


async def test_rollback_stores_nothing_visible_B222(broker):
    await make_topic(broker, "T", 4)
    result = await broker.put_message("T", 0, half_message())
    done = await broker.end_transaction(end_of(result, tx.TRANSACTION_ROLLBACK_TYPE))
    assert done.state == "rolled_back" and done.stored is None
    assert broker.max_offset("T", 0) == 0
    assert broker.open_transactions() == []


async def test_a_repeated_end_changes_nothing_and_a_contrary_one_is_refused_B224(broker):
    await make_topic(broker, "T", 4)
    result = await broker.put_message("T", 0, half_message())
    await broker.end_transaction(end_of(result, tx.TRANSACTION_COMMIT_TYPE))
    again = await broker.end_transaction(end_of(result, tx.TRANSACTION_COMMIT_TYPE))
    assert again.recorded is False
    with pytest.raises(BrokerError, match="already committed"):
        await broker.end_transaction(end_of(result, tx.TRANSACTION_ROLLBACK_TYPE))
    assert broker.max_offset("T", 0) == 1


async def test_an_end_that_does_not_match_the_half_message_is_refused_B225(broker):
    await make_topic(broker, "T", 4)
    result = await broker.put_message("T", 0, half_message())
    phy = result.physical_offsets[0]
    with pytest.raises(BrokerError, match="producer group wrong"):
        await broker.end_transaction(
            tx.EndRequest("other", result.queue_offset, phy, tx.TRANSACTION_COMMIT_TYPE, False, "m")
        )
    with pytest.raises(BrokerError, match="state table offset wrong"):
        await broker.end_transaction(
            tx.EndRequest(GROUP, 7, phy, tx.TRANSACTION_COMMIT_TYPE, False, "m")
        )
    with pytest.raises(BrokerError, match="Find prepared transaction message failed"):
        await broker.end_transaction(
            tx.EndRequest(GROUP, 0, phy + 1, tx.TRANSACTION_COMMIT_TYPE, False, "m")
        )
    assert len(broker.open_transactions()) == 1


async def test_reject_transaction_message_refuses_half_messages_B221(tmp_path, clock, nursery):
    from es_broker.config import BrokerConfig
    from es_broker.core.broker import Broker

    config = BrokerConfig(storePathRootDir=str(tmp_path / "s"), rejectTransactionMessage=True)
    broker = Broker.open(config.storePathRootDir, config, clock)
    await nursery.start(broker.run)
    await make_topic(broker, "T", 4)
    with pytest.raises(NoPermission, match="sending transaction message is forbidden"):
        await broker.put_message("T", 0, half_message())
    nursery.cancel_scope.cancel()


async def test_check_waits_for_the_timeout_then_checks_each_interval_then_discards_B226_B228_B229(
    broker, clock
):
    cfg = broker.config
    await make_topic(broker, "T", 4)
    result = await broker.put_message("T", 3, half_message())
    live = {GROUP: ["client-a"]}
    assert (await broker.check_transactions(live)).checks == ()  # younger than transactionTimeOut
    clock.advance(cfg.transactionTimeOut)
    for attempt in range(1, cfg.transactionCheckMax + 1):
        done = await broker.check_transactions(live)
        (check,) = done.checks
        assert check.attempt == attempt and check.client == "client-a"
        assert check.header.commit_log_offset == result.physical_offsets[0]
        body = wire.decode_one(check.body)[0]
        assert body.topic == "T" and body.queue_id == 3
        assert body.properties["TRANSACTION_CHECK_TIMES"] == str(attempt)
        assert (await broker.check_transactions(live)).checks == ()  # not twice in one interval
        clock.advance(cfg.transactionCheckInterval)
    done = await broker.check_transactions(live)
    assert done.checks == () and done.discarded == 1
    assert broker.open_transactions() == []
    assert broker.max_offset(tx.CHECK_MAX_TIME_TOPIC, 0) == 1
    assert broker.max_offset("T", 3) == 0


async def test_check_immunity_property_delays_the_first_check_B227_B229(broker, clock):
    await make_topic(broker, "T", 4)
    await broker.put_message("T", 0, half_message(CHECK_IMMUNITY_TIME_IN_SECONDS="60"))
    clock.advance(broker.config.transactionTimeOut)
    assert (await broker.check_transactions({})).checks == ()
    clock.advance(60_000)
    (check,) = (await broker.check_transactions({})).checks
    assert check.client == ""  # no live producer: the check counts, nothing is sent


async def test_a_late_commit_after_discard_still_publishes_B225(broker, clock):
    await make_topic(broker, "T", 4)
    result = await broker.put_message("T", 0, half_message())
    clock.advance(broker.config.transactionTimeOut)
    for _ in range(broker.config.transactionCheckMax + 1):
        await broker.check_transactions({})
        clock.advance(broker.config.transactionCheckInterval)
    assert broker.open_transactions() == []
    done = await broker.end_transaction(end_of(result, tx.TRANSACTION_COMMIT_TYPE))
    assert done.state == "committed" and broker.max_offset("T", 0) == 1


async def test_trace_tells_the_whole_story_B230(broker, clock):
    await make_topic(broker, "T", 4)
    result = await broker.put_message("T", 0, half_message())
    clock.advance(broker.config.transactionTimeOut)
    await broker.check_transactions({GROUP: ["c"]})
    await broker.end_transaction(end_of(result, tx.TRANSACTION_COMMIT_TYPE, from_check=True))
    await broker.pull("CG", "T", 0, 0)
    journey = broker.message_journey("Uorder-1")
    events = [e["event"] for e in journey["events"]]
    assert events == ["prepared", "checked", "committed", "delivered"]


async def test_an_unknown_end_changes_nothing_B225(running):
    broker = running.server.broker
    await make_topic(broker, "T", 4)
    result = await broker.put_message("T", 0, half_message())
    fields = {
        "producerGroup": GROUP,
        "tranStateTableOffset": result.queue_offset,
        "commitLogOffset": result.physical_offsets[0],
        "commitOrRollback": tx.TRANSACTION_NOT_TYPE,
        "fromTransactionCheck": True,
        "msgId": "Uorder-1",
    }
    r = await running.call(RequestCode.END_TRANSACTION, fields)
    assert r.code == ResponseCode.SUCCESS and "stays open" in r.remark
    assert len(broker.open_transactions(GROUP)) == 1
    r = await running.call(RequestCode.END_TRANSACTION, dict(fields, commitOrRollback=16))
    assert r.code == ResponseCode.SYSTEM_ERROR and "none of 0" in r.remark
    assert len(broker.open_transactions(GROUP)) == 1
    r = await running.call(RequestCode.END_TRANSACTION, dict(fields, commitOrRollback=12))
    assert r.code == ResponseCode.SUCCESS and broker.open_transactions(GROUP) == []
