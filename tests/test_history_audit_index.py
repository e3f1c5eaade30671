"""Audit indexes (B-415..B-417): `explain` and `acl --at` answer from indexes kept by a projection,
as the records said, without reading the group's or the ACL's records one by one; a directory
written before the indexes is indexed once (archive included), and verifies before and after."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import lmdb
import pytest
import trio

from es_broker.cli import timetravel
from es_broker.cli.timetravel import acl_answer
from es_broker.commands.explain import explain, explain_by_scan
from es_broker.config import BrokerConfig
from es_broker.core.replay import checksums, verify
from es_broker.history import reader
from es_broker.history import seal as sealing
from es_broker.store import Store
from tests.test_history_archive import DAYS, HOUR, SEGMENT, START, _history, _last_day

PAIRS = [("G1", "T1"), ("G2", "T2"), ("%RETRY%G1", "%RETRY%G1"), ("G1", "T2"), ("nobody", "T1")]
MOMENTS = [START - 10] + [START + k * 5 * HOUR + 777 for k in range(DAYS * 24 // 5 + 2)]
AUDIT = ("audit_explain", "audit_groups", "audit_acl")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("audit") / "data"
    trio.run(_history, str(data_dir))
    return data_dir


def _open(data_dir: Path, readonly: bool = True) -> Store:
    return Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=readonly)


def _explains(data_dir: Path, how: Any) -> dict[str, Any]:
    store = _open(data_dir)
    try:
        return {f"{g} {t}": _no_sources(how(store, g, t)) for g, t in PAIRS}
    finally:
        store.close()


def _acls(data_dir: Path) -> dict[int, Any]:
    return {at: _no_sources(acl_answer(str(data_dir), at, "T1", "G1", 3 * HOUR)) for at in MOMENTS}


def _acls_by_scan(data_dir: Path) -> dict[int, Any]:
    store = _open(data_dir)
    try:
        return {
            at: _no_sources(timetravel._acl_by_scan(store, at, "T1", "G1", 3 * HOUR))
            for at in MOMENTS
        }
    finally:
        store.close()


def _no_sources(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k != "read_from"}


def _forget_the_index(data_dir: Path) -> None:
    """The directory as a broker before the audit index left it: no audit database at all."""
    env = lmdb.open(str(data_dir / "lmdb"), max_dbs=64)
    with env.begin(write=True) as txn:
        for name in AUDIT:
            txn.drop(env.open_db(name.encode(), txn=txn), delete=True)
    env.close()


def test_b415_b416_the_index_answers_as_the_records_do(built):
    by_index, by_scan = _explains(built, explain), _explains(built, explain_by_scan)
    assert by_index == by_scan
    assert by_index["G1 T1"]["queues"] and by_index["G2 T2"]["queues"]
    assert by_index["nobody T1"]["queues"] == []
    acls = _acls(built)
    assert acls == _acls_by_scan(built)
    assert any(a["load"] for a in acls.values()) and any(a["denials"] for a in acls.values())


def test_b415_b416_the_verbs_read_no_record_of_the_group_or_the_acl_one_by_one(built, monkeypatch):
    def no_scan(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a verb read the log")

    monkeypatch.setattr(reader, "Reading", no_scan)
    answer = _explains(built, explain)["G2 T2"]
    assert answer["queues"][0]["latest_change"]["seq"] > 0
    read: list[int] = []
    real = reader.records_at

    def counting(store: Store, seqs: Any) -> Any:
        seqs = list(seqs)
        read.extend(seqs)
        return real(store, seqs)

    monkeypatch.setattr(reader, "records_at", counting)
    at = START + 2 * 24 * HOUR + 777
    acl = acl_answer(str(built), at, "T1", "G1", HOUR)
    # the load in force and the summaries of that window: nothing else
    assert read == sorted({acl["load"]["seq"], *(d["seq"] for d in acl["denials"])})


def test_b417_a_directory_written_before_the_index_verifies_answers_and_is_indexed_once(
    built, tmp_path
):
    data_dir = tmp_path / "data"
    shutil.copytree(built, data_dir)
    indexed = checksums(built)
    _forget_the_index(data_dir)
    assert verify(data_dir) == []  # as it was: the audit databases are compared once built
    assert _explains(data_dir, explain) == _explains(built, explain)  # by scan, read-only
    assert _acls(data_dir) == _acls(built)
    store = _open(data_dir, readonly=False)  # a broker's start indexes it
    store.close()
    assert checksums(data_dir) == indexed
    assert verify(data_dir) == [] and verify(data_dir, full=True) == []


def test_b417_a_sealed_directory_is_indexed_from_the_archive_too(built, tmp_path):
    data_dir = tmp_path / "data"
    shutil.copytree(built, data_dir)
    store = _open(data_dir, readonly=False)
    try:
        segments = sealing.plan(store, _last_day(), SEGMENT, None)
        assert len(segments) >= 3
        sealing.seal(store, data_dir, sealing.archive_location(data_dir), segments)
    finally:
        store.close()
    sealed = checksums(data_dir)
    _forget_the_index(data_dir)
    store = _open(data_dir, readonly=False)
    store.close()
    after = checksums(data_dir)
    assert {n: after.get(n) for n in AUDIT} == {n: sealed.get(n) for n in AUDIT}
    assert after.get("audit_acl") and after.get("audit_explain")
    assert _explains(data_dir, explain) == _explains(built, explain)
    assert _acls(data_dir) == _acls(built)
    assert verify(data_dir) == [] and verify(data_dir, full=True) == []
