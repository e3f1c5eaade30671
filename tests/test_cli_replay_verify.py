"""`es-broker replay` and `es-broker verify` as an operator runs them."""

from __future__ import annotations

from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.projections.keys import I64, offset_key
from tests.helpers import cli
from tests.replay_histories import small_history


def test_verify_passes_on_a_live_directory(tmp_path):
    small_history(tmp_path / "d")
    done = cli("verify", "--data-dir", str(tmp_path / "d"))
    assert done.returncode == 0, done.stderr
    assert "OK: every projection" in done.stdout


def test_replay_into_a_new_directory_then_verify_against_it(tmp_path):
    small_history(tmp_path / "d")
    done = cli("replay", "--data-dir", str(tmp_path / "d"), "--into", str(tmp_path / "r"))
    assert done.returncode == 0 and "replayed" in done.stdout
    assert (
        cli(
            "verify", "--data-dir", str(tmp_path / "d"), "--against", str(tmp_path / "r")
        ).returncode
        == 0
    )


def test_verify_prints_the_first_differing_key_and_exits_1(tmp_path):
    small_history(tmp_path / "d")
    broker = Broker.open(tmp_path / "d", BrokerConfig(storePathRootDir=str(tmp_path / "d")))
    with broker.store.log.env.begin(write=True) as txn:  # damage a projection behind the log's back
        txn.put(offset_key("T1", "G1", 0), I64.pack(42), db=broker.store.offsets.db)
    broker.close()
    done = cli("verify", "--data-dir", str(tmp_path / "d"))
    assert done.returncode == 1
    assert f"database 'offsets' differs at key {offset_key('T1', 'G1', 0).hex()}" in done.stdout


def test_replay_refuses_a_directory_that_holds_a_log(tmp_path):
    small_history(tmp_path / "d")
    small_history(tmp_path / "e")
    done = cli("replay", "--data-dir", str(tmp_path / "d"), "--into", str(tmp_path / "e"))
    assert done.returncode == 2 and "already holds a broker log" in done.stderr
