"""`/metrics` in Prometheus' text format, served by the broker process (B-355..B-362).

With `metricsExporterType=PROM` the broker serves its metrics on
`metricsPromExporterHost:metricsPromExporterPort` from prometheus_client's own
HTTP server thread. Nothing is counted per request but the request latency
(one histogram observation as the answer is queued); everything else is read at
scrape time by `BrokerCollector`, on the scrape's thread, from a read
transaction (which never waits on the writer) and from attributes of the
broker's objects. Message counts come from the stats projection
(es_broker/projections/stats.py), so they continue across restarts.

A scrape that fails (a bug, a closed store) answers an HTTP 500 and the broker
goes on: the exporter never shares the broker's fate.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import trio
from prometheus_client import (
    CollectorRegistry,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from es_broker.commands import disk_full
from es_broker.commands.names import DLQ_PREFIX, RETRY_PREFIX
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.ha.master import ReplicationMaster
from es_broker.projections import stats
from es_broker.projections.keys import U64
from es_broker.readmodel.process import read_position, read_quarantined
from es_broker.readmodel.supervisor import FollowerSupervisor
from es_broker.remoting.peer_outcomes import NONE, NOT_YET
from es_broker.server.edge.remoting_server import RemotingServer
from es_broker.server.processors.build import BrokerProcessors


class BrokerServer(Protocol):
    """What /metrics reads of the broker server it serves (es_broker/server/main.py, which starts
    this exporter and so is not imported by it)."""

    @property
    def broker(self) -> Broker: ...
    @property
    def config(self) -> BrokerConfig: ...
    @property
    def replication(self) -> ReplicationMaster | None: ...
    @property
    def processors(self) -> BrokerProcessors: ...
    @property
    def remoting(self) -> RemotingServer: ...
    @property
    def readmodel_url(self) -> str | None: ...
    @property
    def follower(self) -> FollowerSupervisor | None: ...
    def ha_status(self) -> dict[str, object]: ...


log = logging.getLogger("es_broker")

# RocketMQ 5's rpc latency buckets (BrokerMetricsManager: 1, 3, 5, 7, 10, 100 ms, 1, 2, 3, 8 s) in
# seconds: Prometheus' base unit, which promtool requires (RocketMQ 5 exports milliseconds)
RPC_LATENCY_BUCKETS_S = (0.001, 0.003, 0.005, 0.007, 0.01, 0.1, 1.0, 2.0, 3.0, 8.0)
SYSTEM_TOPICS = (
    "SCHEDULE_TOPIC_XXXX",
    "RMQ_SYS_",
    "TBW102",
    "OFFSET_MOVED_EVENT",
    "SELF_TEST_TOPIC",
)


class RequestLatency(Collector):
    """rocketmq_rpc_latency: one observation per answered request, folded into a histogram when
    scraped.

    `observe` runs on the broker's trio thread for every request, so it only bumps a bucket
    count and a sum in plain lists per (request code, response code): no lock, no
    prometheus_client child (whose observe takes a lock). The scrape's thread reads the lists;
    `count` and every bucket come from the same counts, so a scrape is consistent, and the sum
    may lack the observation being made as it reads (B-362).
    """

    BOUNDS = RPC_LATENCY_BUCKETS_S

    def __init__(self, registry: CollectorRegistry, labels: dict[str, str]) -> None:
        self.base = labels
        # (request code, response code) -> [count per bucket (the last: above every bound)], [sum]
        self._counts: dict[tuple[int, int], tuple[list[int], list[float]]] = {}
        registry.register(self)

    def observe(self, request_code: int, response_code: int, started: float) -> None:
        took = time.perf_counter() - started
        entry = self._counts.get((request_code, response_code))
        if entry is None:
            entry = self._counts[(request_code, response_code)] = (
                [0] * (len(self.BOUNDS) + 1),
                [0.0],
            )
        entry[0][bisect.bisect_left(self.BOUNDS, took)] += 1
        entry[1][0] += took

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            "rocketmq_rpc_latency",
            "Time from a request's frame decoded to its answer queued, by request and response code",
            labels=[*self.base, "protocol_type", "request_code", "response_code"],
            unit="seconds",
        )
        for (request_code, response_code), (counts, total) in sorted(
            list(self._counts.items())
        ):  # list(): one step under the GIL
            running, buckets = 0, []
            for bound, n in zip((*self.BOUNDS, float("inf")), list(counts), strict=True):
                running += n
                buckets.append(("+Inf" if bound == float("inf") else str(bound), running))
            family.add_metric(
                [*self.base.values(), "remoting", str(request_code), str(response_code)],
                buckets,
                total[0],
            )
        yield family


def _is_system(topic: str) -> bool:
    return topic.startswith(SYSTEM_TOPICS)


class BrokerCollector(Collector):
    """Everything but the request latency, read from the broker's state when scraped."""

    def __init__(self, server: BrokerServer, token: trio.lowlevel.TrioToken | None = None) -> None:
        self.server = server
        # the broker's trio loop: state only its thread may read is read there, in one short hop
        self.token = token

    def _on_trio(self) -> dict[str, Any]:
        """What only the trio thread may read (peer states, slave sessions, locks, connections)."""
        server = self.server
        status = server.ha_status()
        sessions = []
        if server.replication is not None:
            sessions = [
                (f"{s.broker_id}@{s.addr}", s.acked_seq, s.phy_max)
                for s in server.replication.live_sessions()
            ]
        locks = server.processors.locks
        held = sum(
            1 for group, queues in locks.table.items() for q in queues if locks.owner(group, q)
        )
        return {
            "status": status,
            "sessions": sessions,
            "locks": held,
            "connections": server.remoting.connections,
        }

    def _labels(self) -> dict[str, str]:
        cfg = self.server.config
        return {"cluster": cfg.brokerClusterName, "node_type": "broker", "node_id": cfg.brokerName}

    def collect(self) -> Iterator[Metric]:
        base = self._labels()
        names = list(base)
        values = list(base.values())
        # the one hop to the trio thread first: the reads that follow hold the map where it is
        # (MapGate), and a remap on the trio thread waits for them
        trio_side = (
            trio.from_thread.run_sync(self._on_trio, trio_token=self.token)
            if self.token is not None
            else self._on_trio()
        )
        with self.server.broker.store.log.map_gate.reading():
            yield from self._messages(names, values)
            yield from self._consumers(names, values)
            yield from self._esbroker(names, values, trio_side)

    # ------------------------------------------------------------------ RocketMQ 5's names
    def _messages(self, names: list[str], values: list[str]) -> Iterable[Metric]:
        store = self.server.broker.store
        tl = [*names, "topic", "message_type"]
        m_in = CounterMetricFamily(
            "rocketmq_messages_in", "Messages clients sent, counted from the log", labels=tl
        )
        b_in = CounterMetricFamily(
            "rocketmq_throughput_in", "Bytes of the messages clients sent", labels=tl, unit="bytes"
        )
        gl = [*names, "topic", "consumer_group", "is_retry", "is_system"]
        m_out = CounterMetricFamily(
            "rocketmq_messages_out", "Messages delivered to consumer groups", labels=gl
        )
        b_out = CounterMetricFamily(
            "rocketmq_throughput_out", "Bytes delivered to consumer groups", labels=gl, unit="bytes"
        )
        size = HistogramMetricFamily(
            "rocketmq_message_size", "Sizes of the messages clients sent", labels=tl, unit="bytes"
        )
        denied = CounterMetricFamily(
            "esbroker_acl_denied", "Requests the ACL refused, by reason", labels=[*names, "reason"]
        )
        with store.read() as txn:
            for name, c in store.stats.totals(txn, stats.TOPIC_PUT):
                topic, _, mtype = name.partition("\x00")
                if mtype:
                    m_in.add_metric([*values, topic, mtype], c.messages)
                    b_in.add_metric([*values, topic, mtype], c.size)
            for name, c in store.stats.totals(txn, stats.GROUP_GET):
                topic, _, group = name.rpartition("@")
                lv = [
                    *values,
                    topic,
                    group,
                    _flag(topic.startswith(RETRY_PREFIX)),
                    _flag(_is_system(topic)),
                ]
                m_out.add_metric(lv, c.messages)
                b_out.add_metric(lv, c.size)
            hist: dict[tuple[str, str], dict[int, tuple[int, int]]] = {}
            for name, c in store.stats.totals(txn, stats.SIZE_BUCKETS):
                topic, mtype, which = name.split("\x00")
                hist.setdefault((topic, mtype), {})[int(which)] = (c.messages, c.size)
            for name, c in store.stats.totals(txn, stats.ACL_DENIED):
                denied.add_metric([*values, name], c.messages)
        for (topic, mtype), by_bucket in sorted(hist.items()):
            running, buckets, total = 0, [], 0
            for i, bound in enumerate((*stats.MESSAGE_SIZE_BOUNDS, float("inf"))):
                running += by_bucket.get(i, (0, 0))[0]
                buckets.append(("+Inf" if bound == float("inf") else str(float(bound)), running))
            total = sum(s for _, s in by_bucket.values())
            size.add_metric([*values, topic, mtype], buckets, total)
        return [m_in, b_in, m_out, b_out, size, denied]

    def _consumers(self, names: list[str], values: list[str]) -> Iterable[Metric]:
        broker = self.server.broker
        gl = [*names, "topic", "consumer_group", "is_retry", "is_system"]
        lag = GaugeMetricFamily(
            "rocketmq_consumer_lag_messages", "Messages stored and not yet consumed", labels=gl
        )
        latency = GaugeMetricFamily(
            "rocketmq_consumer_lag_latency",
            "Age of the oldest message not yet consumed (broker time)",
            labels=gl,
            unit="seconds",
        )
        queue_lag = GaugeMetricFamily(
            "esbroker_consumer_queue_lag_messages",
            "Messages stored and not yet consumed, per queue",
            labels=[*names, "topic", "consumer_group", "queue_id"],
        )
        now = broker.store.clock.now_ms()
        per_group: dict[tuple[str, str], list[int]] = {}
        for topic, group, queue_id, offset in broker.offset_table():
            if topic.startswith(DLQ_PREFIX):
                continue
            consumer = max(offset, 0)
            top = broker.max_offset(topic, queue_id)
            diff = top - consumer
            acc = per_group.setdefault((topic, group), [0, 0])
            acc[0] += diff
            queue_lag.add_metric([*values, topic, group, str(queue_id)], diff)
            if diff > 0:
                stored = broker.store_time_at(topic, queue_id, consumer)
                if stored > 0:
                    acc[1] = max(acc[1], now - stored)
        for (topic, group), (diff, age) in sorted(per_group.items()):
            lv = [
                *values,
                topic,
                group,
                _flag(topic.startswith(RETRY_PREFIX)),
                _flag(_is_system(topic)),
            ]
            lag.add_metric(lv, diff)
            latency.add_metric(lv, age / 1000.0)
        return [lag, latency, queue_lag]

    # ------------------------------------------------------------------ es-broker's own
    def _esbroker(
        self, names: list[str], values: list[str], trio_side: dict[str, Any]
    ) -> Iterable[Metric]:
        out = _Families(names, values)
        last_seq = self.server.broker.store.log.last_seq
        self._writer_metrics(out, last_seq)
        self._history_metrics(out)
        if self.server.readmodel_url:
            self._readmodel_metrics(out, last_seq)
        self._peer_metrics(out, trio_side)
        return out.metrics

    def _writer_metrics(self, out: _Families, last_seq: int) -> None:
        """The log's head, the writer's group commits and the disk it writes to."""
        writer, log_ = self.server.broker.writer, self.server.broker.store.log
        out.gauge("esbroker_log_sequence", "Sequence of the last record applied", last_seq)
        out.counter(
            "esbroker_group_commits", "Write transactions committed since start", writer.batches
        )
        out.counter("esbroker_group_commit_jobs", "Jobs written since start", writer.jobs)
        out.gauge(
            "esbroker_disk_full",
            "1 while the disk is full and writes are refused",
            int(writer.disk_full),
        )
        out.counter(
            "esbroker_refused_writes_while_full",
            "Writes refused while the disk was full, since start",
            writer.refused_while_full,
        )
        out.gauge(
            "esbroker_disk_used",
            "Used fraction of the data directory's file system",
            disk_full.disk_usage(log_.path),
            unit="ratio",
        )

    def _history_metrics(self, out: _Families) -> None:
        """The history (B-466): what the hot log holds, where the horizon is, the archive's size."""
        history = self.server.broker.history_status()
        out.gauge("esbroker_history_hot_records", "Records in the hot log", history.hot_records)
        out.gauge(
            "esbroker_history_hot_log",
            "Pages of the hot log's LMDB database",
            history.hot_log_bytes,
            unit="bytes",
        )
        out.gauge(
            "esbroker_history_sealed_sequence",
            "Last sequence sealed to the archive (0: none)",
            history.sealed_upto,
        )
        out.gauge(
            "esbroker_history_horizon_timestamp",
            "Broker time of the last sealed record (-1: none)",
            history.horizon_time / 1000 if history.horizon_time >= 0 else -1,
            unit="seconds",
        )
        out.gauge(
            "esbroker_history_archive",
            "Files in a local archive (-1: a remote filesystem, not listed)",
            history.archive_bytes,
            unit="bytes",
        )

    def _readmodel_metrics(self, out: _Families, last_seq: int) -> None:
        """The read-model follower: records and seconds of broker time behind the log's head."""
        server = self.server
        position = read_position(server.config.storePathRootDir)
        behind = -1 if position is None else max(last_seq - position, 0)
        out.gauge(
            "esbroker_readmodel_lag_records",
            "Records the SQL read model has not applied",
            behind,
        )
        out.gauge(
            "esbroker_readmodel_lag",
            "Broker time between the log's head and the read model's position",
            self._seconds_between(position, last_seq),
            unit="seconds",
        )
        quarantined = read_quarantined(server.config.storePathRootDir)
        out.gauge(
            "esbroker_readmodel_quarantined_records",
            "Records the read model quarantined (-1 before the follower counted)",
            -1 if quarantined is None else quarantined,
        )
        follower = server.follower
        out.gauge(
            "esbroker_readmodel_follower_up",
            "1 while the follower process runs",
            int(bool(follower and follower.pid)),
        )

    def _peer_metrics(self, out: _Families, trio_side: dict[str, Any]) -> None:
        """The requests this broker sends on its own (B-315, B-316): 1 for the state they are in;
        then replication, transactions, queue locks and connections, read on trio's side."""
        names, values = out.names, out.values
        peer = GaugeMetricFamily(
            "esbroker_peer_state",
            "State of the requests the broker sends on its own: 1 for the current one",
            labels=[*names, "request", "state"],
        )
        status = trio_side["status"]
        for field in (
            "nameServerRegistration",
            "slaveFetch",
            "slaveOffsetMerge",
            "transactionCheck",
            "clientNotice",
        ):
            peer.add_metric([*values, field, _peer_state(str(status.get(field, NONE)))], 1)
        out.metrics.append(peer)
        out.gauge(
            "esbroker_nameserver_registration_ok",
            "1 when every name server accepted the last registration",
            int(status.get("nameServerRegistration") == "ok"),
        )
        out.metrics.extend(self._replication(names, values, trio_side["sessions"], status))
        out.gauge(
            "esbroker_open_transactions",
            "Half messages neither committed nor rolled back",
            len(self.server.broker.open_transactions()),
        )
        out.gauge(
            "esbroker_queue_locks_held", "Queues locked by orderly consumers", trio_side["locks"]
        )
        conns = GaugeMetricFamily(
            "esbroker_connections", "Open connections", labels=[*names, "listener"]
        )
        conns.add_metric([*values, "broker"], trio_side["connections"])
        out.metrics.append(conns)

    def _replication(
        self,
        names: list[str],
        values: list[str],
        sessions: list[tuple[str, int, int]],
        status: dict[str, Any],
    ) -> Iterable[Metric]:
        rec = GaugeMetricFamily(
            "esbroker_slave_lag_records",
            "Records a slave has not acknowledged",
            labels=[*names, "slave"],
        )
        byt = GaugeMetricFamily(
            "esbroker_slave_lag_bytes",
            "Commit-log bytes a slave has not acknowledged",
            labels=[*names, "slave"],
        )
        store = self.server.broker.store
        if sessions:  # a master: each slave it serves
            with store.read() as txn:
                phy_max = store.commitlog.phy_max(txn)
            for slave, acked_seq, slave_phy in sessions:
                rec.add_metric([*values, slave], max(store.log.last_seq - acked_seq, 0))
                byt.add_metric([*values, slave], max(phy_max - slave_phy, 0))
        elif "haMasterLastSeq" in status:  # a slave: itself against its master
            behind = int(status["haMasterLastSeq"]) - int(status["haAppliedSeq"])
            rec.add_metric([*values, "self"], max(behind, 0))
        return [rec, byt]

    def _seconds_between(self, position: int | None, head: int) -> float:
        """Broker time from the record at `position` to the one at `head` (0 when caught up)."""
        if position is None:
            return -1.0
        if position >= head:
            return 0.0
        tt = self.server.broker.store.timeindex
        with self.server.broker.store.read() as txn:
            at = _effective_ts(txn, tt.seq_db, max(position, 1))
            top = _effective_ts(txn, tt.seq_db, head)
        return max(top - at, 0) / 1000.0


def _effective_ts(txn: Any, seq_db: Any, seq: int) -> int:
    """The effective time of record `seq`: tt_seq's entry at or before it (time_index.py)."""
    cur = txn.cursor(db=seq_db)
    if not cur.set_range(U64.pack(seq)):
        if not cur.last():
            return 0
    elif U64.unpack(cur.key())[0] > seq and not cur.prev():
        return 0
    return int(U64.unpack(cur.value())[0])


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _peer_state(state: str) -> str:
    if state in ("ok", NONE, NOT_YET):
        return state.replace(" ", "_")
    return "no_answer" if state.startswith("no answer") else "refused"


class MetricsExporter:
    """The HTTP server thread of /metrics and the registry it serves."""

    def __init__(self, server: BrokerServer) -> None:
        # no `_created` series: promtool and RocketMQ 5 have none (prometheus_client leaves the
        # function unannotated)
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(
            _Guarded(BrokerCollector(server, trio.lowlevel.current_trio_token()))
        )
        base = BrokerCollector(server)._labels()
        self.latency = RequestLatency(self.registry, base)
        self.http: Any = None
        self.thread: threading.Thread | None = None

    def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen (port 0: any free port); returns the address bound."""
        self.http, self.thread = start_http_server(port, addr=host, registry=self.registry)
        return host, int(self.http.server_port)

    def stop(self) -> None:
        if self.http is not None:
            self.http.shutdown()
            self.http.server_close()
            self.http = None


class _Guarded(Collector):
    """A collector whose failure is logged and answered as a failed scrape, never raised further."""

    def __init__(self, inner: Collector) -> None:
        self.inner = inner

    def collect(self) -> Iterable[Metric]:
        try:
            return list(self.inner.collect())
        except Exception:
            log.exception("metrics: a scrape failed")
            raise


class _Families:
    """The metric families of one broker, in the order they are added, labelled alike."""

    def __init__(self, names: list[str], values: list[str]) -> None:
        self.names = names
        self.values = values
        self.metrics: list[Metric] = []

    def gauge(self, name: str, doc: str, value: float, unit: str = "") -> None:
        g = GaugeMetricFamily(name, doc, labels=self.names, unit=unit)
        g.add_metric(self.values, value)
        self.metrics.append(g)

    def counter(self, name: str, doc: str, value: float) -> None:
        c = CounterMetricFamily(name, doc, labels=self.names)
        c.add_metric(self.values, value)
        self.metrics.append(c)
