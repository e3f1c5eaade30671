"""A data directory in an older store format: upgraded by a start, recorded, answers unchanged (B-470).

The fixture is a directory written by es-broker before the store format was kept
(tests/data/write_old_store.py at 6573b9b: format 1), with the answers that code gave from it.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from es_broker.commands.store import Store
from es_broker.config import BrokerConfig
from es_broker.core.replay import verify
from es_broker.log.types import RecordType
from es_broker.projections.store_format import CURRENT, FIRST, LEGACY_DATABASES, OldStoreFormat
from tests.data.write_old_store import answers
from tests.helpers import cli

FIXTURE = Path(__file__).parent / "data" / "store-format-1-6573b9b"


@pytest.fixture()
def old_dir(tmp_path: Path) -> Path:
    with tarfile.open(FIXTURE.with_suffix(".tar.gz")) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path


def expected() -> dict:
    return json.loads(FIXTURE.with_suffix(".json").read_text())


def names_in(data_dir: Path) -> set[str]:
    store = Store.open(data_dir, readonly=True)
    try:
        with store.read() as txn:
            return {bytes(key).decode() for key, _ in txn.cursor()}
    finally:
        store.close()


def test_b470_verify_of_an_older_directory_says_run_serve_once(old_dir):
    with pytest.raises(OldStoreFormat) as raised:
        verify(old_dir)
    assert raised.value.found == FIRST
    assert "old format" in str(raised.value) and "serve" in str(raised.value)
    result = cli("verify", "--data-dir", str(old_dir))
    assert result.returncode == 2
    assert "old format" in result.stdout and "run `es-broker serve`" in result.stdout
    assert set(LEGACY_DATABASES) <= names_in(old_dir)  # nothing was converted by looking


def test_b470_a_start_upgrades_an_older_directory_and_records_it(old_dir):
    store = Store.open(old_dir, BrokerConfig(storePathRootDir=str(old_dir)))
    last = store.log.last_seq
    upgraded = [(s, r) for s, r in store.log.read() if r["type"] == RecordType.STORE_UPGRADED]
    assert [seq for seq, _ in upgraded] == [
        last - 4,
        last - 3,
        last - 2,
        last - 1,
        last,
    ]  # a step each
    steps = [(r["from_format"], r["to_format"], r["dropped"]) for _, r in upgraded]
    assert steps == [
        (FIRST, 2, ["key_index", "key_expiry", "key_meta"]),
        (2, 3, ["trace_deliveries"]),
        (3, 4, ["cq"]),
        (4, 5, []),  # nothing sealed: the store index keeps every entry (B-465)
        (5, CURRENT, ["commitlog"]),  # the message bytes in chunks (B-475)
    ]
    with store.read() as txn:
        assert store.format.number(txn) == CURRENT
        keys = txn.stat(store.keyindex.index_db)["entries"]
        pulls = txn.stat(store.trace.pulls)["entries"]
        blocks = txn.stat(store.cq.db)["entries"]
        stored = txn.stat(store.trace.stored)["entries"]
        chunked = txn.stat(store.log.commitlog_db)["entries"]
        marks = txn.stat(store.commitlog.marks)["entries"]
    counts = [dict(r["counts"]) for _, r in upgraded]
    assert counts == [
        {"key_hash": keys},
        {"trace_pulls": pulls},
        {"cq_blocks": blocks},
        {"trace_stored": stored},
        {"commitlog_chunks": chunked, "commitlog_marks": marks},
    ]
    store.close()
    assert not set(LEGACY_DATABASES) & names_in(old_dir)
    # a second start finds the current format: nothing more is written
    Store.open(old_dir).close()
    store = Store.open(old_dir, readonly=True)
    assert store.log.last_seq == last
    store.close()


def test_b470_after_the_upgrade_verify_passes_and_every_answer_is_the_old_codes(old_dir):
    Store.open(old_dir, BrokerConfig(storePathRootDir=str(old_dir))).close()
    assert verify(old_dir) == []
    assert verify(old_dir, full=True) == []
    assert answers(old_dir) == expected()


def test_b470_a_crash_before_the_upgrade_committed_leaves_the_old_format(old_dir, monkeypatch):
    store = Store.open(old_dir, readonly=True)
    last = store.log.last_seq
    store.close()

    def crash(self, txn, messages):
        raise RuntimeError("killed mid-upgrade")

    monkeypatch.setattr("es_broker.projections.key_index.KeyIndexProjection.rebuild", crash)
    with pytest.raises(RuntimeError):
        Store.open(old_dir)
    monkeypatch.undo()
    assert set(LEGACY_DATABASES) <= names_in(old_dir)
    store = Store.open(old_dir)  # the next start upgrades it
    assert store.log.last_seq == last + 5
    store.close()
    assert verify(old_dir) == []


def test_b475_a_crash_while_chunking_the_commit_log_redoes_that_step(old_dir, monkeypatch):
    store = Store.open(old_dir, readonly=True)
    last = store.log.last_seq
    store.close()

    def crash(txn, db, payloads):
        raise RuntimeError("killed mid-upgrade")

    monkeypatch.setattr("es_broker.log.chunks.write", crash)
    with pytest.raises(RuntimeError):
        Store.open(old_dir)
    monkeypatch.undo()
    assert "commitlog" in names_in(old_dir)  # the steps before it are done, this one is not
    store = Store.open(old_dir, readonly=True)
    with store.read() as txn:
        assert store.format.number(txn) == 5
    assert list(store.log.payloads()) == []  # the bytes are still an entry per message
    assert store.log.last_seq == last + 4
    store.close()
    store = Store.open(old_dir)  # the next start chunks the commit log
    assert store.log.last_seq == last + 5
    store.close()
    assert "commitlog" not in names_in(old_dir)
    assert verify(old_dir) == []
    assert answers(old_dir) == expected()


def test_b470_a_slave_upgrades_without_a_record_of_its_own(old_dir):
    config = BrokerConfig(storePathRootDir=str(old_dir), brokerRole="SLAVE", brokerId=1)
    before = Store.open(old_dir, readonly=True)
    last = before.log.last_seq
    before.close()
    store = Store.open(old_dir, config)  # its log stays its master's, record for record
    assert store.log.last_seq == last
    with store.read() as txn:
        assert store.format.number(txn) == CURRENT
    store.close()
    assert verify(old_dir) == []
