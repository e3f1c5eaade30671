"""RocketMQ 5's topic attribute `message.type` through `es-broker admin updateTopic -a` (B-600)."""

from __future__ import annotations

from es_broker.client.admin import Admin
from es_broker.core.replay import verify
from tests.process_fixtures import serve


async def _attributes(namesrv: str, addr: str, topic: str) -> dict[str, str] | None:
    async with Admin.open(namesrv) as admin:
        return (await admin.topic_configs(addr))[topic].attributes


async def test_b600_message_type_is_set_kept_changed_removed_and_replayed(tmp_path):
    with serve(tmp_path / "data", log_file=tmp_path / "broker.log") as b:
        b.admin("updateTopic", "-t", "TA", "-c", "DefaultCluster", "-a", "+message.type=FIFO")
        assert await _attributes(b.namesrv, b.addr, "TA") == {"message.type": "FIFO"}
        b.admin("updateTopic", "-t", "TA", "-c", "DefaultCluster", "-w", "4")  # kept
        assert await _attributes(b.namesrv, b.addr, "TA") == {"message.type": "FIFO"}
        b.admin("updateTopic", "-t", "TA", "-c", "DefaultCluster", "-a", "+message.type=DELAY")
        assert await _attributes(b.namesrv, b.addr, "TA") == {"message.type": "DELAY"}
        b.admin("updateTopic", "-t", "TA", "-c", "DefaultCluster", "-a=-message.type")
        assert not await _attributes(b.namesrv, b.addr, "TA")
        b.admin("updateTopic", "-t", "TB", "-c", "DefaultCluster", "-a", "+message.type=MIXED")
    assert verify(tmp_path / "data") == []  # replay rebuilds the same projections


async def test_b600_an_unknown_attribute_or_value_is_refused_and_nothing_recorded(tmp_path):
    with serve(tmp_path / "data", log_file=tmp_path / "broker.log") as b:
        for bad, why in [
            ("+message.type=QUEUE", "is not one of NORMAL, FIFO, DELAY, TRANSACTION, MIXED"),
            ("+queue.size=3", "unsupported attribute 'queue.size'"),
            ("message.type=FIFO", "neither +key=value nor -key"),
            ("-message.type", "only +key=value attributes are taken when creating"),
        ]:
            done = b.admin(
                "updateTopic", "-t", "TC", "-c", "DefaultCluster", f"-a={bad}", check=False
            )
            assert done.returncode != 0 and why in done.stderr, done.stderr
        async with Admin.open(b.namesrv) as admin:
            assert "TC" not in await admin.topic_configs(b.addr)
