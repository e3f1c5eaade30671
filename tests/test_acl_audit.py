"""The audit of access is event-sourced (docs/semantics.md B-190..B-194): ACL loads and summaries of
refused requests are records, replayed by verify, carried by the export and the read model, and
answered by `es-broker acl`.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import trio
import trio.testing

from es_broker.acl.access import LoadCause
from es_broker.acl.plain import combine, parse_file
from es_broker.acl.signing import Credentials
from es_broker.client.admin import Admin
from es_broker.clock import ManualClock
from es_broker.commands.acl_audit import ROWS_MAX, AclAudit, access_at
from es_broker.commands.errors import ServiceNotAvailable
from es_broker.log import RecordLog
from es_broker.log.types import RecordType
from es_broker.remoting.codes import RequestCode
from tests.acl_fixtures import (
    ACL_YAML,
    ACL_YAML_TOPIC_C,
    ADMIN,
    PRODUCER,
    WRONG_SECRET,
    acl_conf,
    refused,
    topics,
    wire,
)
from tests.helpers import cli_checked
from tests.process_fixtures import serve
from tests.waiting import poll_until

SECRETS = (PRODUCER.secret_key.encode(), ADMIN.secret_key.encode())


def _records(data_dir: Path) -> list[tuple[int, dict]]:
    log = RecordLog(data_dir / "lmdb", readonly=True)
    try:
        return list(log.read())
    finally:
        log.close()


def _of(data_dir: Path, kind: str) -> list[dict]:
    return [r for _, r in _records(data_dir) if r["type"] == kind]


def _refused_by_who(data_dir: Path) -> Counter:
    out: Counter = Counter()
    for r in _of(data_dir, RecordType.ACCESS_DENIED):
        for who, _host, _code, n in r["rows"]:
            out[who] += n
    return out


def _acl_verb(data_dir: Path, at: int, topic: str, group: str | None = None) -> dict:
    extra = ("--group", group) if group else ()
    out = cli_checked(
        "acl",
        "--data-dir",
        str(data_dir),
        "--topic",
        topic,
        *extra,
        "--at",
        str(at),
        "--window",
        "600",
        "--json",
    )
    return json.loads(out.stdout)


async def test_b190_b194_loads_and_refusals_of_a_running_broker_are_records(tmp_path, nursery):
    conf, acl_file = acl_conf(tmp_path, aclDenialSummaryInterval=1)
    data = tmp_path / "data"
    with serve(data, "--config", str(conf), "--readmodel-url", "none") as broker:
        await topics(nursery, broker, "TopicA", "TopicC")
        startup = await poll_until(
            lambda: _of(data, RecordType.ACL_LOADED), 30, "the startup load recorded"
        )
        assert [(r["version"], r["cause"], r["requester"]) for r in startup] == [(1, "startup", "")]
        # refusals of several kinds: no key, a wrong secret, no perm
        anonymous, forged, producer = (
            wire(nursery, None),
            wire(nursery, WRONG_SECRET),
            wire(nursery, PRODUCER),
        )
        for _ in range(2):
            refused(
                await anonymous.send(broker.broker, "TopicA", 0, b"x"), "No accessKey is configured"
            )
        refused(await forged.send(broker.broker, "TopicA", 0, b"x"), "Check signature failed")
        for _ in range(3):
            refused(
                await producer.send(broker.broker, "TopicC", 0, b"x"),
                "No default permission for topic:TopicC",
            )
        refused(
            await wire(nursery, Credentials("NobodyKnowsMe", "whatever1")).send(
                broker.broker, "TopicA", 0, b"x"
            ),
            "No acl config",
        )
        wanted = Counter({"anonymous": 2, "ProducerKey": 4, "unknown:NobodyKnowsMe": 1})
        await poll_until(
            lambda: _refused_by_who(data) == wanted, 30, "the refusals summed in access_denied"
        )
        before_change = time.time_ns() // 1_000_000
        acl_file.write_text(ACL_YAML_TOPIC_C)
        await poll_until(
            lambda: len(_of(data, RecordType.ACL_LOADED)) == 2,
            30,
            "the changed file recorded as a new load",
        )
        after_change = time.time_ns() // 1_000_000

    loads = _of(data, RecordType.ACL_LOADED)
    assert [(r["version"], r["cause"]) for r in loads] == [(1, "startup"), (2, "file change")]
    for r in loads:
        assert [f[0] for f in r["files"]] == [str(acl_file.resolve())]
        assert r["global_white"] == ["10.255.255.*"] and r["data_version"] == [1700000000000, 1]
    producer_of = [
        next(a for a in r["accounts"] if a["access_key"] == "ProducerKey") for r in loads
    ]
    assert producer_of[0]["topic_perms"] == [["TopicA", "PUB|SUB"], ["TopicD", "DENY"]]
    assert producer_of[1]["topic_perms"] == [
        ["TopicA", "PUB|SUB"],
        ["TopicC", "PUB"],
        ["TopicD", "DENY"],
    ]
    assert producer_of[0]["secret_fp"] == producer_of[1]["secret_fp"]  # same secret, same salt
    summaries = _of(data, RecordType.ACCESS_DENIED)
    for r in summaries:
        assert r["window_from"] <= r["window_to"] and r["rows"]
        assert {host for _, host, _, _ in r["rows"]} == {"127.0.0.1"}
        assert {code for _, _, code, _ in r["rows"]} == {int(RequestCode.SEND_MESSAGE_V2)}
    assert _refused_by_who(data) == wanted

    # the secret's bytes are nowhere in the data directory (the LMDB file included)
    for path in data.rglob("*"):
        if path.is_file():
            content = path.read_bytes()
            assert not any(s in content for s in SECRETS), path

    cli_checked("verify", "--data-dir", str(data))  # replay rebuilds every projection byte for byte

    before = _acl_verb(data, before_change, "TopicC", "GroupA")
    after = _acl_verb(data, after_change, "TopicC", "GroupA")
    assert before["load"]["version"] == 1 and after["load"]["version"] == 2
    assert before["global_white"] == ["10.255.255.*"]
    by_key = {a["access_key"]: a for a in before["accounts"]}
    assert by_key["ProducerKey"]["write"] is False and by_key["ProducerKey"]["group_sub"] is True
    assert (
        by_key["AdminKey01"]["write"] is True
        and by_key["AdminKey01"]["topic_perm"] == "admin (all)"
    )
    assert {a["access_key"]: a["write"] for a in after["accounts"]} == {
        "AdminKey01": True,
        "ProducerKey": True,
    }
    assert {a["access_key"]: a["read"] for a in after["accounts"]} == {
        "AdminKey01": True,
        "ProducerKey": False,
    }
    listed: Counter = Counter()
    for d in before["denials"]:
        listed[d["who"]] += d["count"]
    assert listed == wanted
    table = cli_checked(
        "acl", "--data-dir", str(data), "--topic", "TopicC", "--at", str(after_change)
    ).stdout
    assert "ProducerKey" in table and "file change" in table and "10.255.255.*" in table

    out = tmp_path / "export"
    cli_checked("export", "--data-dir", str(data), "--out", str(out))
    changes = (
        ds.dataset(out / "acl_changes", format="parquet", partitioning="hive")
        .to_table()
        .to_pylist()
    )
    assert sorted((r["version"], r["access_key"], r["cause"]) for r in changes) == [
        (1, "AdminKey01", "startup"),
        (1, "ProducerKey", "startup"),
        (2, "AdminKey01", "file change"),
        (2, "ProducerKey", "file change"),
    ]
    denials = (
        ds.dataset(out / "access_denials", format="parquet", partitioning="hive")
        .to_table()
        .to_pylist()
    )
    exported: Counter = Counter()
    for r in denials:
        exported[r["who"]] += r["count"]
    assert exported == wanted
    for path in out.rglob("*"):
        if path.is_file():
            content = path.read_bytes()
            assert not any(s in content for s in SECRETS), path


# ------------------------------------------------------------------ the recorder, without a process
def _acl():
    return combine([parse_file("/etc/plain_acl.yml", ACL_YAML.encode())])


class _Denials:
    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self.reasons: Counter = Counter()

    def take_denials(self) -> Counter:
        taken, self.counts = self.counts, Counter()
        return taken

    def take_reasons(self) -> Counter:
        taken, self.reasons = self.reasons, Counter()
        return taken


class _Submit:
    """A broker's submit: appends to a list, or refuses as a full disk does."""

    def __init__(self) -> None:
        self.records: list[dict] = []
        self.full = False

    async def __call__(self, job):
        if self.full:
            raise ServiceNotAvailable("the broker's disk is full")
        recorded = self.records

        class Ctx:
            def append(self, record: dict) -> int:
                recorded.append(record)
                return len(recorded)

        return job(Ctx())


async def test_b191_a_flood_is_one_summary_per_interval_and_a_full_disk_keeps_the_counts():
    clock = ManualClock(1_000_000)
    audit, denials, submit = AclAudit(b"s" * 32, interval_s=3600), _Denials(), _Submit()
    audit.on_change(_acl(), LoadCause.STARTUP, None)  # before the broker runs: queued
    async with trio.open_nursery() as nursery:
        await nursery.start(audit.run, submit, clock, denials)
        await trio.testing.wait_all_tasks_blocked()
        assert [r["type"] for r in submit.records] == [RecordType.ACL_LOADED]
        for i in range(10_000):  # a flood: many keys, many refusals
            denials.counts[(f"unknown:k{i}", "10.0.0.1", 10)] += 3
        clock.advance(1000)
        submit.full = True
        assert await audit.flush() == 0  # refused: kept, nothing lost
        denials.counts[("anonymous", "10.0.0.2", 310)] += 1
        clock.advance(1000)
        submit.full = False
        assert await audit.flush() > 0
        nursery.cancel_scope.cancel()
    [summary] = [r for r in submit.records if r["type"] == RecordType.ACCESS_DENIED]
    assert summary["window_from"] == 1_000_000 and summary["window_to"] == 1_002_000
    assert summary["requests"] == 30_001
    # bounded keys; the rest under <overflow>, one per request code as AccessControl counts them
    assert len(summary["rows"]) == ROWS_MAX + 2
    assert sum(n for *_, n in summary["rows"]) == 30_001


async def test_b347_the_summary_carries_the_reasons_of_es_brokers_signature_refusals():
    """B-347: refusals counted with a reason (stale, replayed, ...) are in the summary's `reasons`."""
    clock = ManualClock(1_000_000)
    audit, denials, submit = AclAudit(b"s" * 32, interval_s=3600), _Denials(), _Submit()
    async with trio.open_nursery() as nursery:
        await nursery.start(audit.run, submit, clock, denials)
        denials.counts[("AdminKey01", "10.0.0.1", 215)] += 3
        denials.reasons[("AdminKey01", "10.0.0.1", 215, "replayed")] += 2
        clock.advance(1000)
        assert await audit.flush() > 0
        nursery.cancel_scope.cancel()
    [summary] = [r for r in submit.records if r["type"] == RecordType.ACCESS_DENIED]
    assert summary["rows"] == [["AdminKey01", "10.0.0.1", 215, 3]]
    assert summary["reasons"] == [["AdminKey01", "10.0.0.1", 215, "replayed", 2]]


def test_b192_the_answer_follows_the_load_in_force_at_the_time():
    salt = b"s" * 32
    from es_broker.commands.acl_audit import load_fields
    from es_broker.log import make

    first = make(RecordType.ACL_LOADED, 1000, **load_fields(_acl(), "startup", None, 1, salt))
    second = make(
        RecordType.ACL_LOADED,
        3000,
        **load_fields(
            combine([parse_file("/etc/plain_acl.yml", ACL_YAML_TOPIC_C.encode())]),
            "admin request",
            "AdminKey01@10.0.0.9",
            2,
            salt,
        ),
    )
    denied = make(
        RecordType.ACCESS_DENIED,
        2000,
        listener="broker",
        window_from=1500,
        window_to=2000,
        interval_s=60,
        acl_version=1,
        requests=5,
        rows=[["ProducerKey", "10.0.0.1", 310, 5]],
        reasons=[["ProducerKey", "10.0.0.1", 310, "replayed", 2]],
    )
    log = [(1, first), (2, denied), (3, second)]
    at_2000 = access_at(log, 2000, "TopicC", window_ms=100)
    assert at_2000["denials"][0]["reasons"] == {"replayed": 2}  # B-347
    assert {a["access_key"]: a["write"] for a in at_2000["accounts"]} == {
        "AdminKey01": True,
        "ProducerKey": False,
    }
    assert [d["count"] for d in at_2000["denials"]] == [5]
    at_3000 = access_at(log, 3000, "TopicC", window_ms=100)
    assert at_3000["load"]["requester"] == "AdminKey01@10.0.0.9" and at_3000["denials"] == []
    assert {a["access_key"]: a["write"] for a in at_3000["accounts"]} == {
        "AdminKey01": True,
        "ProducerKey": True,
    }
    assert access_at(log, 999, "TopicC")["load"] is None


async def test_b190_an_admin_request_that_changes_the_acl_is_recorded_with_its_requester(
    tmp_path, nursery
):
    conf, _ = acl_conf(tmp_path)
    data = tmp_path / "data"
    with serve(data, "--config", str(conf), "--readmodel-url", "none") as broker:
        await poll_until(lambda: _of(data, RecordType.ACL_LOADED), 30, "the startup load recorded")
        async with Admin.open(broker.namesrv, credentials=ADMIN) as admin:
            await admin.update_acl_config(
                broker.broker, "NewcomerKey", "NewcomerSecret", topic_perms=["TopicA=PUB"]
            )
        loads = await poll_until(
            lambda: _of(data, RecordType.ACL_LOADED)[1:], 30, "the admin change recorded"
        )
    (load,) = loads
    assert load["cause"] == LoadCause.ADMIN.value and load["requester"].startswith("AdminKey01@")
    assert "NewcomerKey" in [a["access_key"] for a in load["accounts"]]
    assert b"NewcomerSecret" not in (data / "lmdb" / "data.mdb").read_bytes()
