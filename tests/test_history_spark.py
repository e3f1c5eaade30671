"""Spark's offsets_at over a data directory whose old segments were sealed (B-409): the same rows."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import trio

from es_broker.config import BrokerConfig
from es_broker.history import seal as sealing
from es_broker.store import Store
from tests.test_history_archive import DAYS, HOUR, SEGMENT, START, _history, _last_day

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark"))

esb_spark = pytest.importorskip("esb_spark")


@pytest.fixture(scope="module")
def spark():
    session = esb_spark.session("es-broker history tests", "local[2]")
    session.conf.set("spark.sql.shuffle.partitions", "4")
    yield session
    session.stop()


def test_b409_spark_offsets_at_reads_the_archive_for_sealed_segments(spark, tmp_path):
    """B-409: esb_spark.offsets_at over the live data directory gives the same rows after sealing."""
    hot = tmp_path / "hot"
    trio.run(_history, str(hot))
    sealed = tmp_path / "sealed"
    shutil.copytree(hot, sealed)
    store = Store.open(sealed, BrokerConfig(storePathRootDir=str(sealed)))
    try:
        segments = sealing.plan(store, _last_day(), SEGMENT, None)
        assert len(segments) >= 3
        sealing.seal(store, sealed, sealing.archive_location(sealed), segments)
    finally:
        store.close()
    moments = [START + k * 11 * HOUR + 77 for k in range(DAYS * 24 // 11 + 1)]
    before = esb_spark.Input(spark, data_dir=str(hot))
    after = esb_spark.Input(spark, data_dir=str(sealed))
    for at in moments:
        want = esb_spark.offsets_at(before, at, durable=True).collect()
        assert esb_spark.offsets_at(after, at, durable=True).collect() == want
    assert any(esb_spark.offsets_at(after, START + 12 * HOUR, durable=True).collect())
