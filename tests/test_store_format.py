"""A data directory in an older store format: upgraded by a start, recorded, answers unchanged (B-470).

The fixtures are directories written by older es-broker (tests/data/write_old_store.py): at
6573b9b, before the store format was kept (format 1), and at 75c846d (format 5), each with the
answers that code gave from it.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from es_broker.commands.explain import explain_by_scan
from es_broker.config import BrokerConfig
from es_broker.core.replay import verify
from es_broker.log.types import RecordType
from es_broker.projections.store_format import CURRENT, FIRST, LEGACY_DATABASES, OldStoreFormat
from es_broker.store import Store
from tests.data.write_old_store import answers
from tests.helpers import cli

DATA = Path(__file__).parent / "data"
FIXTURES = {FIRST: DATA / "store-format-1-6573b9b", 5: DATA / "store-format-5-75c846d"}
# every step, (from, to, the older layout's databases it drops)
STEPS = [
    (FIRST, 2, ["key_index", "key_expiry", "key_meta"]),
    (2, 3, ["trace_deliveries"]),
    (3, 4, ["cq"]),
    (4, 5, []),  # nothing sealed: the store index keeps every entry (B-465)
    (5, 6, ["cq_blocks"]),
    (6, 7, ["commitlog"]),
    (7, 8, []),  # the audit index marked unbuilt, and built again at the same open (B-504)
    (8, 9, []),  # nothing sealed: the pop trace keeps every entry (B-642)
]


@pytest.fixture(params=sorted(FIXTURES), ids=lambda found: f"format-{found}")
def found(request) -> int:
    return request.param


@pytest.fixture()
def old_dir(tmp_path: Path, found: int) -> Path:
    with tarfile.open(FIXTURES[found].with_suffix(".tar.gz")) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path


def expected(found: int) -> dict:
    return json.loads(FIXTURES[found].with_suffix(".json").read_text())


def steps_from(found: int) -> list[tuple[int, int, list[str]]]:
    return [step for step in STEPS if step[0] >= found]


def names_in(data_dir: Path) -> set[str]:
    store = Store.open(data_dir, readonly=True)
    try:
        with store.read() as txn:
            return {bytes(key).decode() for key, _ in txn.cursor()}
    finally:
        store.close()


def assert_old_answers(data_dir: Path, found: int) -> None:
    """Every answer is the older code's; `explain` counts every offset change the offset rule
    knows (the older code counted the commits only, B-504): its answer is the records' own."""
    got, want = answers(data_dir), expected(found)
    assert {k: v for k, v in got.items() if k != "explain"} == {
        k: v for k, v in want.items() if k != "explain"
    }
    assert got["explain"] == explained_by_scan(data_dir, got["explain"])


def explained_by_scan(data_dir: Path, pairs: dict) -> dict:
    """`explain` of each "group topic" from the records themselves (B-415, B-504)."""
    store = Store.open(data_dir, readonly=True)
    try:
        return {
            pair: {**explain_by_scan(store, *pair.split(" ")), "read_from": answer["read_from"]}
            for pair, answer in pairs.items()
        }
    finally:
        store.close()


def test_b470_verify_of_an_older_directory_says_run_serve_once(old_dir, found):
    legacy = names_in(old_dir) & set(LEGACY_DATABASES)
    assert legacy and legacy <= {name for step in steps_from(found) for name in step[2]}
    with pytest.raises(OldStoreFormat) as raised:
        verify(old_dir)
    assert raised.value.found == found
    assert "old format" in str(raised.value) and "serve" in str(raised.value)
    result = cli("verify", "--data-dir", str(old_dir))
    assert result.returncode == 2
    assert "old format" in result.stdout and "run `es-broker serve`" in result.stdout
    assert names_in(old_dir) & set(LEGACY_DATABASES) == legacy  # nothing converted by looking


def test_b470_a_start_upgrades_an_older_directory_and_records_it(old_dir, found):
    store = Store.open(old_dir, readonly=True)
    with store.read() as txn:
        explained = txn.stat(store.audit.explain_db)["entries"]  # as the older code indexed
    store.close()
    store = Store.open(old_dir, BrokerConfig(storePathRootDir=str(old_dir)))
    last = store.log.last_seq
    upgraded = [(s, r) for s, r in store.log.read() if r["type"] == RecordType.STORE_UPGRADED]
    steps = steps_from(found)
    assert steps[-1][1] == CURRENT
    first_new = last - len(steps) + 1
    assert [seq for seq, _ in upgraded if seq >= first_new] == list(range(first_new, last + 1))
    upgraded = upgraded[-len(steps) :]  # one per step
    assert [(r["from_format"], r["to_format"], r["dropped"]) for _, r in upgraded] == steps
    with store.read() as txn:
        assert store.format.number(txn) == CURRENT
        keys = txn.stat(store.keyindex.index_db)["entries"]
        pages = txn.stat(store.cq.db)["entries"]
        written = {
            2: {"key_hash": keys},
            3: {"trace_pulls": txn.stat(store.trace.pulls)["entries"]},
            4: {"cq_pages": pages},
            5: {"trace_stored": txn.stat(store.trace.stored)["entries"]},
            6: {"cq_pages": pages},
            7: {  # the message bytes in chunks (B-475)
                "commitlog_chunks": txn.stat(store.log.commitlog_db)["entries"],
                "commitlog_marks": txn.stat(store.commitlog.marks)["entries"],
            },
            8: {"audit_explain": explained},  # the entries it held, marked unbuilt (B-504)
            9: {"pop_trace": txn.stat(store.pop.trace)["entries"]},
        }
    counts = [dict(r["counts"]) for _, r in upgraded]
    assert counts == [written[to] for _, to, _ in steps]
    store.close()
    assert not set(LEGACY_DATABASES) & names_in(old_dir)
    # a second start finds the current format: nothing more is written
    Store.open(old_dir).close()
    store = Store.open(old_dir, readonly=True)
    assert store.log.last_seq == last
    store.close()


def test_b470_after_the_upgrade_verify_passes_and_every_answer_is_the_old_codes(old_dir, found):
    Store.open(old_dir, BrokerConfig(storePathRootDir=str(old_dir))).close()
    assert verify(old_dir) == []
    assert verify(old_dir, full=True) == []
    assert_old_answers(old_dir, found)


def test_b470_a_crash_before_the_upgrade_committed_leaves_the_old_format(
    old_dir, found, monkeypatch
):
    store = Store.open(old_dir, readonly=True)
    last = store.log.last_seq
    store.close()
    legacy = names_in(old_dir) & set(LEGACY_DATABASES)

    def crash(self, *args):
        raise RuntimeError("killed mid-upgrade")

    # the first step each fixture takes
    first_step = {
        FIRST: "es_broker.projections.key_index.KeyIndexProjection.rebuild",
        5: "es_broker.projections.consume_queue.ConsumeQueueProjection.convert",
    }
    monkeypatch.setattr(first_step[found], crash)
    with pytest.raises(RuntimeError):
        Store.open(old_dir)
    monkeypatch.undo()
    assert names_in(old_dir) & set(LEGACY_DATABASES) == legacy
    store = Store.open(old_dir)  # the next start upgrades it
    assert store.log.last_seq == last + len(steps_from(found))
    store.close()
    assert verify(old_dir) == []


def test_b475_a_crash_while_chunking_the_commit_log_redoes_that_step(old_dir, found, monkeypatch):
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
        assert store.format.number(txn) == 6
    assert list(store.log.payloads()) == []  # the bytes are still an entry per message
    before_chunking = [step for step in steps_from(found) if step[1] < 7]
    assert store.log.last_seq == last + len(before_chunking)
    store.close()
    store = Store.open(old_dir)  # the next start chunks the commit log (and goes on)
    assert store.log.last_seq == last + len(steps_from(found))
    store.close()
    assert "commitlog" not in names_in(old_dir)
    assert verify(old_dir) == []
    assert_old_answers(old_dir, found)


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
