"""Replaying the log rebuilds byte-identical projections, for generated histories (B-134)."""

from __future__ import annotations

import tempfile

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.core.replay import checksums, replay, verify
from tests.replay_histories import ops, run_history


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, max_size=40))
def test_b134_replayed_projections_equal_live_ones_byte_for_byte(history):
    with tempfile.TemporaryDirectory() as live:
        trio.run(run_history, live, history)
        assert verify(live) == []


def test_verify_names_the_first_differing_key(tmp_path):
    live = str(tmp_path / "live")
    trio.run(
        run_history,
        live,
        [("topic", "T1", 2, 6), ("send", "T1", 0, b"x", "A"), ("commit", "G1", "T1", 0, 1)],
    )
    copy = tmp_path / "copy"
    replay(live, copy)
    # tamper with the copy's offset table behind the log's back
    broker = Broker.open(copy, BrokerConfig(storePathRootDir=str(copy)))
    from es_broker.projections.keys import I64, offset_key

    with broker.store.log.env.begin(write=True) as txn:
        txn.put(offset_key("T1", "G1", 0), I64.pack(99), db=broker.store.offsets.db)
    broker.close()
    from es_broker.core.replay import compare

    (difference,) = compare(live, copy)
    assert difference.database == "offsets"
    assert difference.key == offset_key("T1", "G1", 0)
    assert checksums(live)["log"] == checksums(copy)["log"]
