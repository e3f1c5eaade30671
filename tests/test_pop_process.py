"""RocketMQ 5's pop consumption through a broker process, as its proxy speaks it over remoting:
POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME (docs/semantics.md B-580..B-599)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import trio

from es_broker.client.admin import Admin
from es_broker.remoting import fastjson
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.message import StoredMessage
from tests.helpers import cli
from tests.pop_session import ack, change, committed, handle, journey, last_seq, pop, send
from tests.process_fixtures import ServedBroker, serve
from tests.waiting import poll_until
from tests.wire_session import Session, on_wire, send_fields


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[ServedBroker]:
    """One broker process for the module; each test uses topics and groups of its own."""
    with serve(tmp_path_factory.mktemp("pop") / "data") as served:
        yield served


async def _group(s: Session, group: str, retry_max_times: int) -> None:
    body = {"groupName": group, "retryMaxTimes": retry_max_times, "consumeEnable": True}
    await s.ok(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, fastjson.dumps(body).encode())


def test_b580_b581_b585_pop_and_ack_every_message_then_the_group_offset_is_past_them(broker):
    async def scenario(s: Session) -> None:
        await s.create_topic("PopAll", 2)
        for i in range(6):
            await send(s, "PopAll", f"m{i}".encode(), queue_id=i % 2)
        got = []
        while len(got) < 6:
            popped = await pop(s, "GAll", "PopAll", max_nums=4, poll_ms=5000)
            assert popped.messages, "a pop held on two queues of six messages found none"
            got.extend(popped.messages)
        assert sorted(m.body for m in got) == [f"m{i}".encode() for i in range(6)]
        assert all(m.reconsume_times == 0 and "POP_CK" in m.properties for m in got)
        # nothing is acked yet: the group's offset stays at each queue's first message (B-585)
        assert [await committed(s, "GAll", "PopAll", q) for q in (0, 1)] == [0, 0]
        for m in got:
            r = await ack(s, "GAll", m)
            assert r.code == ResponseCode.SUCCESS, r.remark
        assert (await pop(s, "GAll", "PopAll")).messages == []
        assert [await committed(s, "GAll", "PopAll", q) for q in (0, 1)] == [3, 3]
        events = (await journey(s, got[0].msg_id))["events"]
        held = [e for e in events if e["event"] in ("popped", "acked")]
        assert [e["event"] for e in held] == ["popped", "acked"]
        assert held[0]["group"] == held[1]["group"] == "GAll"
        assert held[0]["invisibleUntil"] == held[0]["popTime"] + 60_000
        moved = [e for e in events if e["event"] == "offset_committed"]
        assert moved and moved[-1]["cause"] in ("pop", "pop_ack")
        # the messages popped count as the group's messages out, as pulled ones do
        async with Admin.open(broker.namesrv) as admin:
            at = (int(time.time() * 1000) // 60_000 + 1) * 60_000
            got_nums = await admin.broker_stats(broker.broker, "GROUP_GET_NUMS", "PopAll@GAll", at)
            assert got_nums.stats_day is not None and got_nums.stats_day.sum == 6

    on_wire(broker, scenario)


def test_b582_an_unacked_message_comes_back_after_its_invisible_time(broker):
    async def scenario(s: Session) -> None:
        await s.create_topic("PopBack", 1)
        await send(s, "PopBack", b"late")
        first = await pop(s, "GBack", "PopBack", invisible_ms=300)
        (message,) = first.messages
        # held until the revive service makes it visible again
        again = await pop(s, "GBack", "PopBack", invisible_ms=60_000, poll_ms=20_000)
        (back,) = again.messages
        assert (back.queue_offset, back.body, back.reconsume_times) == (0, b"late", 1)
        assert handle(back) != handle(message)
        stale = await ack(s, "GBack", message)
        assert stale.code == ResponseCode.NO_MESSAGE and "stale" in stale.remark
        assert (await ack(s, "GBack", back)).code == ResponseCode.SUCCESS
        assert await committed(s, "GBack", "PopBack") == 1
        kinds = [e["event"] for e in (await journey(s, message.msg_id))["events"]]
        pops = [k for k in kinds if k in ("popped", "pop_revived", "acked")]
        assert pops == ["popped", "pop_revived", "popped", "acked"]

    on_wire(broker, scenario)


def test_b583_a_changed_invisible_time_keeps_the_message_out_under_a_new_handle(broker):
    async def scenario(s: Session) -> None:
        await s.create_topic("PopChange", 1)
        await send(s, "PopChange", b"slow")
        (message,) = (await pop(s, "GChange", "PopChange", invisible_ms=3_000)).messages
        r = await change(s, "GChange", message, 600_000)
        assert r.code == ResponseCode.SUCCESS, r.remark
        new = r.ext_fields["extraInfo"]
        assert int(r.ext_fields["invisibleTime"]) == 600_000
        # a pop held past the first invisible time finds nothing: the change kept it out
        assert (await pop(s, "GChange", "PopChange", poll_ms=5_000)).messages == []
        assert (await ack(s, "GChange", message)).code == ResponseCode.NO_MESSAGE
        assert (await ack(s, "GChange", message, extra_info=new)).code == ResponseCode.SUCCESS
        events = (await journey(s, message.msg_id))["events"]
        changed = [e for e in events if e["event"] == "invisible_changed"]
        assert changed and changed[0]["invisibleUntil"] == changed[0]["popTime"] + 600_000

    on_wire(broker, scenario)


def test_b587_a_message_never_acked_is_dead_lettered_after_the_groups_retry_max_times(broker):
    async def scenario(s: Session) -> None:
        await s.create_topic("PopDead", 1)
        await _group(s, "GDead", 1)
        await send(s, "PopDead", b"poison")
        await send(s, "PopDead", b"fine")
        first = await pop(s, "GDead", "PopDead", invisible_ms=200)
        assert first.bodies == [b"poison", b"fine"]
        assert (await ack(s, "GDead", first.messages[1])).code == ResponseCode.SUCCESS
        (second,) = (await pop(s, "GDead", "PopDead", invisible_ms=200, poll_ms=20_000)).messages
        assert (second.body, second.reconsume_times) == (b"poison", 1)
        # handed out 1 + retryMaxTimes times: the next expiry dead-letters it

        async def dead_lettered() -> bool:
            r = await s.call(RequestCode.GET_MAX_OFFSET, {"topic": "%DLQ%GDead", "queueId": 0})
            return r.code == ResponseCode.SUCCESS and int(r.ext_fields["offset"]) == 1

        await poll_until(dead_lettered, 20, "the poison message in %DLQ%GDead")
        assert (await pop(s, "GDead", "PopDead")).messages == []
        assert await committed(s, "GDead", "PopDead") == 2
        events = (await journey(s, first.messages[0].msg_id))["events"]
        (dead,) = [e for e in events if e["event"] == "pop_dead_lettered"]
        assert dead["targetTopic"] == "%DLQ%GDead" and dead["maxReconsumeTimes"] == 1
        assert dead["deliveryCount"] == 2 and dead["newMsgId"]

    on_wire(broker, scenario)


def test_b586_a_forged_or_another_groups_handle_is_refused_and_nothing_is_recorded(broker):
    async def scenario(s: Session) -> None:
        await s.create_topic("PopForge", 1)
        await send(s, "PopForge", b"mine")
        (message,) = (await pop(s, "GOwner", "PopForge")).messages
        ck = handle(message)
        before = await last_seq(s)
        fields = ck.split(" ")
        forged = " ".join([*fields[:9], "0" * 32])
        later = " ".join([fields[0], str(int(fields[1]) + 1), *fields[2:]])
        for group, extra in (
            ("GOther", ck),  # another group's handle
            ("GOwner", forged),  # a MAC the broker never made
            ("GOwner", later),  # a pop time changed
            ("GOwner", "not a handle"),
        ):
            r = await ack(s, group, message, extra_info=extra)
            assert r.code == ResponseCode.INVALID_PARAMETER, (group, extra, r.remark)
            assert "invalid receipt handle" in r.remark
            r = await change(s, group, message, 10_000, extra_info=extra)
            assert r.code == ResponseCode.INVALID_PARAMETER, (group, extra, r.remark)
        assert await last_seq(s) == before
        assert (await ack(s, "GOwner", message)).code == ResponseCode.SUCCESS

    on_wire(broker, scenario)


def test_b584_an_order_pop_hands_a_queue_out_one_batch_at_a_time_in_order(broker):
    async def scenario(s: Session) -> None:
        await s.create_topic("PopFifo", 1)
        for i in range(5):
            await send(s, "PopFifo", f"f{i}".encode())
        batch = await pop(s, "GFifo", "PopFifo", max_nums=2, order=True, invisible_ms=60_000)
        assert batch.bodies == [b"f0", b"f1"]
        assert batch.response.ext_fields["reviveQid"] == "999"
        # the queue is held by the batch out: nothing more, not even by a pop that waits
        assert (await pop(s, "GFifo", "PopFifo", order=True)).messages == []
        assert (await ack(s, "GFifo", batch.messages[0])).code == ResponseCode.SUCCESS
        assert (await pop(s, "GFifo", "PopFifo", order=True)).messages == []
        result = []
        # the hold is 60 s: an answer before means the ack of the batch's last message woke it
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:

                async def held() -> None:
                    result.append(await pop(s, "GFifo", "PopFifo", order=True, poll_ms=60_000))

                nursery.start_soon(held)
                await trio.sleep(0)
                assert (await ack(s, "GFifo", batch.messages[1])).code == ResponseCode.SUCCESS
        assert result[0].bodies == [b"f2", b"f3", b"f4"]
        # that batch out holds the queue in turn; the group's offset is at its first message
        assert (await pop(s, "GFifo", "PopFifo", order=True)).messages == []
        assert (await committed(s, "GFifo", "PopFifo")) == 2

    on_wire(broker, scenario)


def test_b584_an_expired_order_batch_is_handed_out_again_before_newer_messages(broker):
    async def scenario(s: Session) -> None:
        await s.create_topic("PopFifoBack", 1)
        for i in range(3):
            await send(s, "PopFifoBack", f"g{i}".encode())
        first = await pop(s, "GFb", "PopFifoBack", max_nums=2, order=True, invisible_ms=200)
        assert first.bodies == [b"g0", b"g1"]
        again = await pop(s, "GFb", "PopFifoBack", max_nums=3, order=True, poll_ms=20_000)
        assert again.bodies == [b"g0", b"g1", b"g2"]
        assert [m.reconsume_times for m in again.messages] == [1, 1, 0]
        counts = again.response.ext_fields["orderCountInfo"]
        assert counts == "0 qo0%0 1;0 qo0%1 1;0 qo0%2 0"

    on_wire(broker, scenario)


def test_b588_a_held_pop_is_answered_by_the_message_that_arrives(broker):
    async def scenario(s: Session) -> None:
        await s.create_topic("PopHold", 1)
        result = []
        async with trio.open_nursery() as nursery:

            async def held() -> None:
                result.append(await pop(s, "GHold", "PopHold", poll_ms=60_000))

            nursery.start_soon(held)
            await trio.sleep(0)
            await send(s, "PopHold", b"arrived")
            # the hold is 60 s: an answer before means the arrival woke it
            await poll_until(lambda: result, 30, "the held pop answered by the arrival")
        assert result[0].bodies == [b"arrived"]

    on_wire(broker, scenario)


def test_b580_a_pop_of_more_than_32_or_of_a_missing_topic_is_refused(broker):
    async def scenario(s: Session) -> None:
        await s.create_topic("PopBad", 1)
        fields = {
            "consumerGroup": "GBad",
            "topic": "PopBad",
            "queueId": 0,
            "maxMsgNums": 33,
            "invisibleTime": 1000,
            "pollTime": 0,
            "bornTime": 0,
            "initMode": 0,
        }
        r = await s.call(RequestCode.POP_MESSAGE, fields)
        assert r.code == ResponseCode.INVALID_PARAMETER and "32" in r.remark
        r = await s.call(RequestCode.POP_MESSAGE, {**fields, "maxMsgNums": 1, "topic": "NoSuch"})
        assert r.code == ResponseCode.TOPIC_NOT_EXIST
        r = await s.call(RequestCode.POP_MESSAGE, {**fields, "maxMsgNums": 1, "queueId": 5})
        assert r.code == ResponseCode.SYSTEM_ERROR and "queueId[5] is illegal" in r.remark
        r = await s.call(RequestCode.POP_MESSAGE, {**fields, "invisibleTime": 0})
        assert r.code == ResponseCode.SYSTEM_ERROR and "invisibleTime" in r.remark

    on_wire(broker, scenario)


def test_b590_replay_rebuilds_the_same_projections_after_pop_traffic(tmp_path):
    data = tmp_path / "data"
    with serve(data) as served:

        async def scenario(s: Session) -> None:
            await s.create_topic("PopReplay", 2)
            await _group(s, "GReplay", 0)
            for i in range(8):
                await send(s, "PopReplay", f"r{i}".encode(), queue_id=i % 2)
            popped = await pop(s, "GReplay", "PopReplay", max_nums=8, invisible_ms=200)
            await ack(s, "GReplay", popped.messages[0])
            r = await change(s, "GReplay", popped.messages[1], 60_000)
            assert r.code == ResponseCode.SUCCESS
            # the rest expire; retryMaxTimes 0 sends them to %DLQ%GReplay

            async def dead() -> bool:
                r = await s.call(
                    RequestCode.GET_MAX_OFFSET, {"topic": "%DLQ%GReplay", "queueId": 0}
                )
                return r.code == ResponseCode.SUCCESS and int(r.ext_fields["offset"]) == 6

            await poll_until(dead, 20, "six dead letters")
            await pop(s, "GReplay", "PopReplay", order=True)
            # and a timer message, parked then delivered (B-589)
            await s.create_topic("PopReplayTimer", 1)
            await send(s, "PopReplayTimer", b"timed", props={"TIMER_DELAY_MS": "300"})
            assert (await pop(s, "GReplay", "PopReplayTimer", poll_ms=20_000)).bodies == [b"timed"]

        on_wire(served, scenario)
    done = cli("verify", "--data-dir", str(data))
    assert done.returncode == 0, done.stdout + done.stderr
    done = cli("replay", "--data-dir", str(data), "--into", str(tmp_path / "again"))
    assert done.returncode == 0, done.stderr
    done = cli("verify", "--data-dir", str(data), "--against", str(tmp_path / "again"))
    assert done.returncode == 0, done.stdout + done.stderr


def test_b591_message_trace_tells_who_held_the_message_until_when_and_who_acked_it(broker):
    async def scenario(s: Session) -> str:
        await s.create_topic("PopTrace", 1)
        await send(s, "PopTrace", b"traced")
        (message,) = (await pop(s, "GTrace", "PopTrace", invisible_ms=200)).messages
        # a proxy says which RocketMQ 5 client it pops and acks for
        (again,) = (
            await pop(s, "GTrace", "PopTrace", poll_ms=20_000, for_client="app-7@10.1.1.7")
        ).messages
        r = await ack(s, "GTrace", again, for_client="app-7@10.1.1.7")
        assert r.code == ResponseCode.SUCCESS
        return message.msg_id

    msg_id = on_wire(broker, scenario)
    text = broker.admin("messageTrace", "-i", msg_id).stdout
    lines = [line for line in text.splitlines() if "group GTrace" in line]
    assert [line.split()[3] for line in lines] == [
        "POPPED",
        "POP_REVIVED",
        "POPPED",
        "ACKED",
        "OFFSET_COMMITTED",
    ], text
    assert "delivery 2" in lines[2] and "not acked by" in lines[1]
    assert "client app-7@10.1.1.7 (via 127.0.0.1:" in lines[2]
    assert "client app-7@10.1.1.7 (via" in lines[3] and "acked" in lines[3]


def test_b589_a_message_sent_for_a_time_is_neither_pulled_nor_popped_before_it(broker):
    async def scenario(s: Session) -> None:
        await s.create_topic("PopTimer", 1)
        at = int(time.time() * 1000) + 3_000
        sent = await send(s, "PopTimer", b"later", props={"TIMER_DELIVER_MS": str(at)})
        assert sent.ext_fields["queueId"] == "0"
        await send(s, "PopTimer", b"now")
        assert (await pop(s, "GTimer", "PopTimer")).bodies == [b"now"]
        assert [m.body for m in await s.pull("PopTimer", 0, group="GPull")] == [b"now"]
        (late,) = (await pop(s, "GTimer", "PopTimer", poll_ms=20_000)).messages
        assert late.body == b"later" and late.store_timestamp >= at
        assert late.properties["TIMER_DELIVER_MS"] == str(at)
        assert "TIMER_OUT_MS" not in late.properties
        for props in (
            {"TIMER_DELAY_SEC": "x"},
            {"TIMER_DELIVER_MS": str(at + 4 * 24 * 3600 * 1000)},  # beyond timerMaxDelaySec
        ):
            r = await s.call(RequestCode.SEND_MESSAGE_V2, send_fields("PopTimer", props), b"no")
            assert r.code == ResponseCode.MESSAGE_ILLEGAL, (props, r.remark)
        await send(s, "PopTimer", b"soon", props={"TIMER_DELAY_MS": "500"})
        (soon,) = (await pop(s, "GTimer", "PopTimer", poll_ms=20_000)).messages
        assert soon.body == b"soon" and soon.properties["TIMER_DELAY_MS"] == "500"

    on_wire(broker, scenario)


def test_b585_a_reset_of_a_pop_group_restarts_its_pops_and_history_tells_every_move(broker):
    async def scenario(s: Session) -> list[StoredMessage]:
        await s.create_topic("PopReset", 1)
        await s.wait_for_route("PopReset")
        for i in range(5):
            await send(s, "PopReset", f"p{i}".encode())
        first = await pop(s, "GReset", "PopReset", max_nums=2)
        assert (await ack(s, "GReset", first.messages[0])).code == ResponseCode.SUCCESS
        assert await committed(s, "GReset", "PopReset") == 1
        return first.messages

    first = on_wire(broker, scenario)
    cli_ok = cli(
        "admin", "-n", broker.namesrv, "resetOffset", "-g", "GReset", "-t", "PopReset",
        "--to-offset", "3", "--mode", "server_side",
    )  # fmt: skip
    assert cli_ok.returncode == 0, cli_ok.stderr

    async def after_reset(s: Session) -> None:
        again = await pop(s, "GReset", "PopReset")
        assert again.offsets == [3, 4]
        stale = await ack(s, "GReset", first[1])
        assert stale.code == ResponseCode.NO_MESSAGE, stale.remark
        for m in again.messages:
            assert (await ack(s, "GReset", m)).code == ResponseCode.SUCCESS
        assert await committed(s, "GReset", "PopReset") == 5

    on_wire(broker, after_reset)
    done = cli(
        "history", "--data-dir", str(broker.data_dir), "--group", "GReset", "--topic", "PopReset",
        "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    changes = [e for e in json.loads(done.stdout)["entries"] if e["kind"] == "offset_change"]
    assert [(c["old"], c["new"], c["cause"]) for c in changes] == [
        (-1, 0, "pop"),
        (0, 1, "pop_ack"),
        (1, 3, "reset"),
        (3, 4, "pop_ack"),
        (4, 5, "pop_ack"),
    ]
    done = cli("explain", "--namesrv", broker.namesrv, "-g", "GReset", "-t", "PopReset")
    assert done.returncode == 0, done.stderr
    assert "4 -> 5 by" in done.stdout and "(pop_ack); 5 changes in all" in done.stdout, done.stdout
