"""`es-broker admin queryMsgById` finds a message by the id `Producer.send` prints (B-491).

That id is the unique key (UNIQ_KEY), 32 hex digits like an IPv4 offset message id:
read as one it names a port out of range. The verb looks it up as a unique key
then, as mqadmin's viewMessage(topic, msgId) does; an offset id is still read
as one, and an id that is neither is said so in one line.
"""

from __future__ import annotations

import json

from es_broker.client import SendStatus, SyncProducer
from es_broker.remoting.message import parse_offset_msg_id
from tests.process_fixtures import serve


def test_b491_query_msg_by_id_finds_the_unique_key_a_send_printed(tmp_path):
    with serve(tmp_path / "data", "--readmodel-url", "none") as served:
        with SyncProducer(served.namesrv, "IdPG", client_ip="127.0.0.1") as producer:
            producer.send("IdOther", b"another topic")
            sent = producer.send("IdT", b"find me", tags="TagA")
        assert sent.status == SendStatus.SEND_OK
        (_, port), _ = parse_offset_msg_id(sent.msg_id)
        assert not 0 < port < 65536  # what made the verb connect to a port out of range

        by_unique_key = served.admin_json("queryMsgById", "-i", sent.msg_id)
        assert by_unique_key["topic"] == "IdT" and by_unique_key["body"] == "find me"
        assert by_unique_key["properties"]["UNIQ_KEY"] == sent.msg_id
        assert by_unique_key["msgId"] == sent.offset_msg_id

        in_topic = served.admin_json("queryMsgById", "-i", sent.msg_id, "-t", "IdT")
        assert in_topic["msgId"] == sent.offset_msg_id
        by_offset_id = served.admin_json("queryMsgById", "-i", sent.offset_msg_id)
        assert by_offset_id["body"] == "find me"

        table = served.admin("queryMsgById", "-i", sent.msg_id).stdout
        assert "find me" in table and sent.offset_msg_id in table


def test_b491_an_id_that_names_no_message_is_said_so_in_one_line(tmp_path):
    with serve(tmp_path / "data", "--readmodel-url", "none") as served:
        with SyncProducer(served.namesrv, "IdPG", client_ip="127.0.0.1") as producer:
            sent = producer.send("IdT", b"present")
        absent = sent.msg_id[:-4] + ("0000" if not sent.msg_id.endswith("0000") else "1111")
        done = served.admin("queryMsgById", "-i", absent, check=False)
        assert done.returncode == 1
        assert "Traceback" not in done.stderr
        line = done.stderr.strip()
        assert len(line.splitlines()) == 1, done.stderr
        assert absent in line and "unique key" in line and "out of range" not in line
        assert json.loads(served.admin("topicList", "--json").stdout)  # the broker goes on


def test_b491_an_id_of_another_length_is_looked_up_as_a_unique_key(tmp_path):
    """A RocketMQ 5 client's id (34 hex digits) is no offset id: the verb asks for it as a
    unique key, in `-t TOPIC` or in every topic, as viewMessage(topic, msgId) falls back."""
    rocketmq5_id = "0102FC000000011F140B1F05D400000000"
    with serve(tmp_path / "data", "--readmodel-url", "none") as served:
        with SyncProducer(served.namesrv, "IdPG", client_ip="127.0.0.1") as producer:
            sent = producer.send("IdT", b"from a 5.x client", properties={"UNIQ_KEY": rocketmq5_id})
        assert sent.msg_id == rocketmq5_id

        for topic in ((), ("-t", "IdT")):
            found = served.admin_json("queryMsgById", "-i", rocketmq5_id, *topic)
            assert (found["body"], found["msgId"]) == ("from a 5.x client", sent.offset_msg_id)

        absent = rocketmq5_id[:-4] + "0001"
        done = served.admin("queryMsgById", "-i", absent, "-t", "IdT", check=False)
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert "in topic IdT has it as its unique key" in done.stderr
