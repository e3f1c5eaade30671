"""Typed records: a log written before the classes existed replays to the same databases, and every
record of it parses into its class and encodes back to the very same bytes (B-134)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import msgpack
import pytest

from es_broker.config import BrokerConfig
from es_broker.core.replay import checksums, replay
from es_broker.log import records, types
from es_broker.log import typed as record_classes
from es_broker.log.store import AppendContext
from es_broker.log.types import Cause, RecordType
from es_broker.projections.store_format import LEGACY_DATABASES as LEGACY
from es_broker.store import Store

FIXTURE = Path(__file__).parent / "data" / "records-6d35145.msgpack"


@pytest.fixture(scope="module")
def fixture() -> dict[str, Any]:
    loaded: dict[str, Any] = msgpack.unpackb(FIXTURE.read_bytes(), strict_map_key=False)
    return loaded


def load(fixture: dict[str, Any], data_dir: Path) -> None:
    """A fresh data directory holding the fixture's payloads and records, applied by this code."""
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)))

    def payloads(ctx: AppendContext) -> None:
        for phy, data in fixture["payloads"]:
            ctx.put_payload(phy, data)

    def log(ctx: AppendContext) -> None:
        for raw in fixture["records"]:
            ctx.append_raw(raw)

    try:
        store.log.write_batch([payloads])
        store.log.write_batch([log])
        store.log.flush()
    finally:
        store.close()


def raw_records(fixture: dict[str, Any]) -> Iterator[tuple[bytes, records.Record]]:
    for raw in fixture["records"]:
        yield raw, records.unpack(raw)


def test_a_log_written_before_typed_records_builds_the_same_databases_B134(fixture, tmp_path):
    load(fixture, tmp_path / "loaded")
    loaded = checksums(tmp_path / "loaded")
    # databases newer than the fixture (the message counts, B-356) are built at open: pinned by replay;
    # those of an older store format (B-470) are replaced: pinned by tests/test_store_format.py
    kept = {name: sum for name, sum in fixture["checksums"].items() if name not in LEGACY}
    assert {name: loaded[name] for name in kept} == kept
    replay(tmp_path / "loaded", tmp_path / "replayed")
    assert checksums(tmp_path / "replayed") == loaded


def test_every_record_of_the_old_log_parses_into_its_class_and_encodes_to_the_same_bytes(fixture):
    seen = set()
    for raw, record in raw_records(fixture):
        typed = types.parse(record)
        assert record["type"] == type(typed).TYPE
        assert records.pack(typed.to_record(record["ts"])) == raw
        seen.add(typed.TYPE)
    # the fixture's history reaches nearly every writer; the rest are pinned by their own tests
    unreached = {
        RecordType.DELIVERIES_UNRECORDED,
        RecordType.HA_PROMOTED,  # newer than the fixture: tests/test_ha_election.py
        RecordType.HA_RECORDS_SET_ASIDE,
        RecordType.HISTORY_ARCHIVED,  # newer than the fixture: tests/test_history_archive.py
        RecordType.IMPORTED,  # newer than the fixture: tests/test_import_rocketmq.py
        RecordType.OFFSET_COMMIT_IGNORED,
        RecordType.REPLY_PUSHED,  # newer than the fixture: tests/test_request_reply.py
        RecordType.SLAVE_CAUGHT_UP,
        RecordType.STORE_UPGRADED,  # newer than the fixture: tests/test_store_format.py
        # RocketMQ 5's pop consumption, newer than the fixture: tests/test_pop_process.py
        RecordType.MESSAGES_POPPED,
        RecordType.POP_ACKED,
        RecordType.POP_EXPIRED,
        RecordType.POP_INVISIBLE_CHANGED,
    }
    assert seen == set(RecordType) - unreached


def test_an_enum_is_written_as_its_text():
    record = types.OffsetCommitted(
        group="G", topic="T", queue_id=0, offset=1, old=-1, cause=Cause.CLIENT_COMMIT, requester=""
    ).to_record(5)
    assert type(record["cause"]) is str and record["cause"] == "client_commit"
    assert types.parse(record) == types.OffsetCommitted(
        group="G", topic="T", queue_id=0, offset=1, old=-1, cause=Cause.CLIENT_COMMIT, requester=""
    )


def test_an_optional_field_left_as_none_is_absent_from_the_record():
    stored = types.MessagesStored(
        topic="T", queue_id=0, queue_offset=0, units=[[0, 10, 0]], producer_group="", requester=""
    )
    assert "cause" not in stored.to_record(1) and "delay" not in stored.to_record(1)
    assert types.parse(stored.to_record(1)) == stored


def test_a_record_keeps_the_key_order_its_writer_always_used():
    dropped = types.MessageSentBack(
        group="G",
        offset=5,
        header_delay_level=0,
        decision="dropped",
        reason="retry_queue_nums_0",
        client_origin_msg_id=None,
        client_origin_topic=None,
        requester="c",
    ).to_record(1)
    assert list(dropped)[3:] == list(types._SENT_BACK_DROPPED)


def test_a_value_that_does_not_fit_is_refused_before_anything_is_written():
    with pytest.raises(records.RecordOutOfRange, match="requester holds"):
        types.TopicDeleted(topic="T", requester="x" * (records.MAX_TEXT + 1)).to_record(1)
    with pytest.raises(records.RecordOutOfRange, match="queue_id = -1"):
        types.PullOffsetMoved(
            group="G",
            topic="T",
            queue_id=-1,
            offset=0,
            status="NO_NEW_MSG",
            next_offset=0,
            min_offset=0,
            max_offset=0,
            client="c",
        ).to_record(1)


def test_a_misspelt_field_fails_at_once():
    with pytest.raises(TypeError):
        types.TopicDeleted(topic="T", requestor="x")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="unknown fields"):
        types.parse({"type": "topic_deleted", "v": 1, "ts": 1, "topic": "T", "requestor": "x"})
    with pytest.raises(ValueError, match="unknown record type"):
        types.parse({"type": "topic_deleeted", "v": 1, "ts": 1})


def test_an_old_record_version_is_upcast_into_the_current_class(tmp_path):
    # a version 0 of topic_deleted that named its requester `who`
    records.register_upcaster(
        RecordType.TOPIC_DELETED,
        0,
        lambda r: {**{k: v for k, v in r.items() if k != "who"}, "v": 1, "requester": r["who"]},
    )
    raw = records.pack({"type": "topic_deleted", "v": 0, "ts": 9, "topic": "T", "who": "admin"})
    parsed = types.parse(records.unpack(raw))
    assert parsed == types.TopicDeleted(topic="T", requester="admin")


def test_every_record_type_has_one_frozen_slotted_class():
    for kind in RecordType:
        cls = record_classes._CLASSES[kind]
        assert cls.TYPE is kind
        params = cls.__dataclass_params__  # type: ignore[attr-defined]
        assert params.frozen and "__slots__" in cls.__dict__
        assert dataclasses.fields(cls)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- readers, checked by mypy

READER = """
from es_broker.log import Record
from es_broker.log.types import MessagesStoredRecord, OffsetCommitted


def committed_offset(record: Record) -> int:
    return OffsetCommitted.from_record(record).{attribute}


def last_unit(record: Record) -> list[int]:
    stored: MessagesStoredRecord = record  # type: ignore[assignment]
    return stored["{key}"][-1]
"""


def mypy_errors(tmp_path: Path, source: str) -> list[str]:
    """mypy's error lines for one module that reads records, checked as strictly as the projections."""
    module = tmp_path / "reader.py"
    module.write_text(source)
    root = Path(__file__).parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(module)],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    return [line for line in done.stdout.splitlines() if ": error:" in line]


def test_a_misspelt_field_read_is_a_type_error_before_it_runs_B134(tmp_path):
    # a reader of the class (off the hot path) and a reader of the dict view (on it), spelt right
    assert mypy_errors(tmp_path, READER.format(attribute="offset", key="units")) == []
    errors = mypy_errors(tmp_path, READER.format(attribute="ofset", key="unit"))
    # each misspelling is named at its line (mypy adds that the result is then Any)
    assert any(
        'reader.py:7: error: "OffsetCommitted" has no attribute "ofset"' in e for e in errors
    ), errors
    assert any(
        'reader.py:12: error: TypedDict "MessagesStoredRecord" has no key "unit"' in e
        for e in errors
    ), errors


def test_each_dict_view_holds_the_keys_of_its_class_B134(fixture):
    for cls, view in types.DICT_VIEWS.items():
        assert view.__required_keys__ <= {"type", "v", "ts"} | set(cls.__slots__)
    seen = set()
    for raw in fixture["records"]:
        record = records.unpack(raw)
        for cls, view in types.DICT_VIEWS.items():
            if record["type"] == cls.TYPE:
                seen.add(cls)
                assert view.__required_keys__ <= record.keys()
                assert record.keys() <= view.__required_keys__ | view.__optional_keys__
    assert seen == set(types.DICT_VIEWS)


def test_a_dict_view_that_drifts_from_its_class_fails_at_import_B134():
    class Drifted(TypedDict):
        type: str
        v: int
        ts: int
        group: str

    with pytest.raises(TypeError, match="does not hold the keys of OffsetCommitted"):
        types._check_view(types.OffsetCommitted, Drifted)
