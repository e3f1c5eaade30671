"""The admin client writes every request through the header class of its code (remoting/headers.py,
es_headers.py): what it sends decodes into that class, and the class writes it back field for field,
in its declared order. No broker: a stand-in client records the requests and answers the few whose
answer the next request depends on."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from es_broker.client.admin import Admin
from es_broker.remoting import requests
from es_broker.remoting.bodies import (
    BrokerData,
    ClusterInfo,
    ConsumeStats,
    MessageQueue,
    OffsetWrapper,
    QueueData,
    TopicRouteData,
)
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, request, response_to
from es_broker.remoting.header_fields import CustomHeader
from es_broker.remoting.headers import SendMessageRequestHeader

BROKER = BrokerData("C", "b", {0: "127.0.0.1:10911"})
ANSWER_BODIES = {
    RequestCode.GET_BROKER_CLUSTER_INFO: ClusterInfo(
        broker_addr_table={"b": BROKER}, cluster_addr_table={"C": ("b",)}
    ).encode(),
    RequestCode.GET_ROUTEINFO_BY_TOPIC: TopicRouteData(
        queue_datas=(QueueData("b", 2, 2, 6),), broker_datas=(BROKER,)
    ).encode(),
    RequestCode.GET_CONSUME_STATS: ConsumeStats(
        offset_table={MessageQueue("T", "b", 0): OffsetWrapper(10, 5, 0)}
    ).encode(),
}
# answers in their header only: the offsets the old reset path looks up, then writes
HEADER_ANSWERS = {
    RequestCode.GET_MAX_OFFSET: {"offset": "7"},
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: {"offset": "7"},
    RequestCode.UPDATE_CONSUMER_OFFSET: {},
}


class Sent(Exception):
    """The stand-in's answer to a request whose answer the test does not need."""


class RecordingClient:
    def __init__(self) -> None:
        self.sent: list[RemotingCommand] = []

    async def invoke(
        self, addr: str, command: RemotingCommand, timeout: float | None = None
    ) -> RemotingCommand:
        self.sent.append(command)
        code = command.code
        if code in ANSWER_BODIES:
            return response_to(command, ResponseCode.SUCCESS, body=ANSWER_BODIES[code])
        if code in HEADER_ANSWERS:
            return response_to(command, ResponseCode.SUCCESS, None, HEADER_ANSWERS[code])
        if code == RequestCode.INVOKE_BROKER_TO_RESET_OFFSET:
            return response_to(command, ResponseCode.CONSUMER_NOT_ONLINE)  # on to the old path
        raise Sent


MSG_ID = "7F0000010000276F0000000000000123"
CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("route", ("T",), {}),
    ("cluster_info", (), {}),
    ("topic_list", (), {}),
    ("queue_offsets", ("A", "T", 1), {}),
    ("queue_offsets", ("A", "T", 1), {"at": 1_700_000_000_000}),
    ("min_offset", ("A", "T", 2), {}),
    ("consumer_progress", ("G",), {}),
    ("consumer_connection", ("G",), {}),
    ("reset_offset_by_time", ("G", "T", 1_700_000_000_000, True), {}),
    ("reset_offset_old", ("G", "T", -1, True), {}),
    ("reset_offset", ("G", "T", "time", 5), {}),
    ("reset_offset", ("G", "T", "offset", 5), {"dry_run": True, "mode": "server_side"}),
    ("producer_connection", ("PG", "T"), {}),
    ("consumer_running_info", ("G", "cid", True), {}),
    ("update_topic", ("A", "T", 2, 3, 6, True), {}),
    ("topic_configs", ("A",), {}),
    ("delete_topic", (["A"], "T"), {}),
    ("topic_status", ("T",), {}),
    ("update_group", ("A", {"groupName": "G"}), {}),
    ("delete_group", ("A", "G", True), {}),
    ("clone_group_offset", ("A", "S", "D", "T", False), {}),
    ("view_message", (MSG_ID,), {}),
    ("message_by_offset", ("T", "b", 1, 9), {}),
    ("messages_by_key", ("T", "k"), {}),
    ("messages_by_uniq_key", ("T", "U1"), {}),
    ("send_message", ("T", b"hi", "tag", "key"), {}),
    ("redrive_dlq", ("G", "T", "original", 5, True), {}),
    ("open_transactions", ("PG",), {}),
    ("message_trace", (MSG_ID,), {}),
    ("broker_runtime", ("A",), {}),
    ("ha_switch", ("A", "n2"), {}),
    ("broker_config", ("A",), {}),
    ("update_broker_config", ("A", {"a": "1"}), {}),
    ("delete_expired_commitlog", ("A",), {}),
    ("history_archive", ("A", 1_700_000_000_000, 5.0), {}),
    ("update_acl_config", ("A", "ak", "sk"), {"white_remote_address": "1.2.*", "admin": True}),
    ("delete_acl_config", ("A", "ak"), {}),
    ("update_global_white_addrs", ("A", ["1.1.1.1"], "/x/plain_acl.yml"), {}),
    ("acl_config_version", ("A",), {}),
    ("acl_config", ("A",), {}),
    ("broker_stats", ("A", "GROUP_GET_NUMS", "T@G", 17_000), {}),
    ("topic_consumed_by", ("A", "T"), {}),
    ("stats_history", ("A", 1, 2, 5, "T"), {}),
    ("offsets_at", ("G", 123, "T", True), {}),
    ("offset_history", ("G", "T", 1, 2, 3, True), {}),
    ("offset_timeline", ("G", "T", 1, 2, 9), {}),
    ("account_scope", ("T", "G"), {}),
    ("explain_group", ("G", "T"), {}),
]


@pytest.mark.parametrize(("method", "args", "kwargs"), CALLS, ids=[c[0] for c in CALLS])
async def test_every_admin_request_is_written_by_the_header_class_of_its_code(
    method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    client = RecordingClient()
    admin = Admin(client, "127.0.0.1:9876")  # type: ignore[arg-type]
    with contextlib.suppress(Sent):
        await getattr(admin, method)(*args, **kwargs)
    assert client.sent
    for command in client.sent:
        header = requests.decode(command)
        assert isinstance(header, CustomHeader), (command.code, header)
        assert list(header.to_fields(command.code).items()) == list(command.ext_fields.items())


def test_a_request_carries_its_header_as_the_class_writes_it() -> None:
    header = SendMessageRequestHeader(topic="T", queue_id=1, born_timestamp=5, flag=0)
    for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
        assert request(code, header).ext_fields == header.to_fields(code)
        assert request(code, header.to_fields(code)) == request(code, header)
    assert request(RequestCode.GET_BROKER_CLUSTER_INFO).ext_fields == {}
