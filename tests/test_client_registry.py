"""Heartbeat registry: channels expire after 120 s of silence (B-129), groups are told of changes."""

from __future__ import annotations

from es_broker.server.clients import ClientRegistry


class FakeChannel:
    remote_addr = "10.0.0.9:1"


def consumer(group: str, topic: str = "T", sub: str = "*") -> dict:
    return {
        "groupName": group,
        "subscriptionDataSet": [{"topic": topic, "subString": sub, "subVersion": 1}],
    }


def test_b129_channel_silent_for_120_s_is_dropped_and_the_group_notified():
    now = [0]
    notified = []
    registry = ClientRegistry(lambda g, chs: notified.append((g, len(chs))), now_ms=lambda: now[0])
    a, b = FakeChannel(), FakeChannel()
    registry.register_consumer(a, "a@1", "JAVA", 409, consumer("G"))
    now[0] = 60_000
    registry.register_consumer(b, "b@1", "JAVA", 409, consumer("G"))
    now[0] = 120_001
    assert registry.scan_expired() == [a]
    assert registry.consumer_group("G").client_ids() == ["b@1"]
    assert notified[-1] == ("G", 1)


def test_a_heartbeat_within_120_s_keeps_the_channel():
    now = [0]
    registry = ClientRegistry(now_ms=lambda: now[0])
    a = FakeChannel()
    registry.register_consumer(a, "a@1", "JAVA", 409, consumer("G"))
    now[0] = 100_000
    registry.register_consumer(a, "a@1", "JAVA", 409, consumer("G"))
    now[0] = 200_000
    assert registry.scan_expired() == []


def test_changed_subscription_notifies_the_group():
    notified = []
    registry = ClientRegistry(lambda g, chs: notified.append(g))
    a = FakeChannel()
    assert registry.register_consumer(a, "a@1", "JAVA", 409, consumer("G", sub="*"))
    assert not registry.register_consumer(a, "a@1", "JAVA", 409, consumer("G", sub="*"))
    assert registry.register_consumer(a, "a@1", "JAVA", 409, consumer("G", sub="TagA"))
    assert notified == ["G", "G"]
