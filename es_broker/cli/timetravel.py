"""`es-broker offsets | history | acl | export`: time travel and audit over a data directory.

    es-broker offsets --group G [--topic T] --at TIME [--durable] [--json] [--namesrv H:P]
    es-broker history --group G [--topic T] [--since TIME] [--until TIME] [--json] [--namesrv H:P]
    es-broker acl --topic T [--group G] --at TIME [--window SECONDS] [--json]
    es-broker export --data-dir D --out DIR

TIME: now | epoch millis | yyyy-MM-dd#HH:mm:ss:SSS | ISO 8601 (a time without
a zone is local time, as mqadmin reads it). With --namesrv, every broker of
the cluster is asked over the wire and the answer has a broker column.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from es_broker.cli.cluster import add_cluster_options, ask
from es_broker.cli.datadir import add_data_dir, open_log_readonly, open_store, source
from es_broker.log.types import RecordType
from es_broker.timetravel.timeparse import format_time, parse_time

if TYPE_CHECKING:  # imported where they run, for a quick start of the other commands
    from es_broker.timetravel.query import HistoryEntry, QueueOffsetAt

T = TypeVar("T")

TIME_HELP = "now | epoch millis | yyyy-MM-dd#HH:mm:ss:SSS | ISO 8601"


# ---------------------------------------------------------------------- offsets


def print_offsets(
    rows: list[QueueOffsetAt],
    *,
    at: int,
    position: int | None,
    group: str,
    topic: str | None,
    durable: bool,
    tick: int | None,
    as_json: bool,
    origin: str,
    brokers: list[str] | None = None,
) -> None:
    """The offset table; with `brokers` (the broker of each row) a cluster's, with a broker column."""
    if as_json:
        doc: dict[str, Any] = {
            "at": at,
            "group": group,
            "topic": topic,
            "source": origin,
            "queues": [
                r.as_dict() if brokers is None else {"broker": b, **r.as_dict()}
                for r, b in _paired(rows, brokers)
            ],
        }
        if position is not None:
            doc["position"] = position
        if durable:
            doc["persist_tick"] = tick
        print(json.dumps(doc))
        return
    where = f"topic {topic}" if topic else "every topic"
    pos = f", log position {position}" if position is not None else ""
    print(f"offsets of group {group} on {where} at {format_time(at)} ({at}){pos}, from {origin}")
    if durable:
        kept = (
            f"{format_time(tick)} ({tick})"
            if tick is not None
            else "none yet (within 10 s of start)"
        )
        print(f"durable = the value at the last compat persist tick <= that moment (B-133): {kept}")
    if not rows:
        print("  (no offsets at that moment)")
        return
    head = ["broker"] if brokers is not None else []
    head += ["topic", "queue", "offset", "max", "lag"]
    if durable:
        head += ["durable", "durable lag"]
    head += ["changed at", "cause", "by", "seq"]
    table = [head]
    for r, broker in _paired(rows, brokers):
        line = [broker] if broker is not None else []
        line += [r.topic, str(r.queue_id), str(r.offset), str(r.max_offset), _dash(r.lag)]
        if durable:
            line += [str(r.durable), _dash(r.durable_lag)]
        line += [format_time(r.time), r.cause, r.requester or "-", str(r.seq)]
        table.append(line)
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        print("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _paired(items: list[T], brokers: list[str] | None) -> list[tuple[T, str | None]]:
    """Each item with its broker (a cluster's answer), or with None (a data directory's)."""
    if brokers is None:
        return [(item, None) for item in items]
    return list(zip(items, brokers, strict=True))


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _cmd_offsets(args: argparse.Namespace) -> int:
    from es_broker.timetravel.query import QueueOffsetAt, TimeTravel

    at = parse_time(args.at)
    if args.namesrv:
        answers = ask(
            args, lambda admin: admin.offsets_at(args.group, at, args.topic, args.durable)
        )
        pairs = [
            (a.broker_name, QueueOffsetAt(**dataclasses.asdict(q)))
            for a in answers
            for q in a.body.queues
        ]
        print_offsets(
            [row for _, row in pairs],
            at=at,
            position=None,
            group=args.group,
            topic=args.topic,
            durable=args.durable,
            tick=None,
            as_json=args.json,
            origin=f"the time index of each broker of name server {args.namesrv} "
            f"({', '.join(a.broker_name for a in answers) or 'none'})",
            brokers=[broker for broker, _ in pairs],
        )
        return 0
    with open_store(args) as store:
        travel = TimeTravel(store)
        with store.read() as txn:
            rows = travel.offsets_at(
                txn, at, group=args.group, topic=args.topic, durable=args.durable
            )
            position = travel.position_at(txn, at)
            tick = travel.persist_tick(txn, at) if args.durable else None
    print_offsets(
        rows,
        at=at,
        position=position,
        group=args.group,
        topic=args.topic,
        durable=args.durable,
        tick=tick,
        as_json=args.json,
        origin="the broker's time index",
    )
    return 0


# ---------------------------------------------------------------------- history


def describe(entry: HistoryEntry) -> str:
    """One history line's text after the time: what changed, why, who."""
    d = entry.detail
    if entry.kind == "offset_change":
        return (
            f"{entry.topic} q{entry.queue_id}  {entry.old} -> {entry.new}  ({entry.cause}) "
            f"by {entry.requester or '(unknown)'}"
        )
    if entry.kind == RecordType.RESET_REQUESTED:
        kind, value = d.get("kind", "time"), d.get("value", d.get("timestamp"))
        to = (
            "time 0 (the earliest)"
            if kind == "time" and value == 0
            else f"time {format_time(value)}"
            if kind == "time" and value not in (None, -1)
            else "latest (max)"
            if kind == "time"
            else f"{kind} {value if value is not None else ''}".strip()
        )
        queues = "; ".join(f"q{q[0]} {q[1]} -> {q[3]} {q[4]}" for q in d.get("queues") or ())
        notified = d.get("notified") or []
        return (
            f"{entry.topic} reset requested by {entry.requester or '(unknown)'}: to {to}, "
            f"{'force' if d.get('force') else 'no force'}, mode {d.get('mode', 'compat')}; {queues}; "
            + (f"notified {', '.join(map(str, notified))}" if notified else "no consumer online")
        )
    if entry.kind == RecordType.PULL_OFFSET_MOVED:
        return (
            f"{entry.topic} q{entry.queue_id}  pull at {d.get('offset')} answered {d.get('status')}: "
            f"moved to {d.get('next_offset')} (min {d.get('min_offset')}, max {d.get('max_offset')}) "
            f"for {entry.requester or '(unknown)'}"
        )
    if entry.kind == RecordType.OFFSET_COMMIT_IGNORED:
        return (
            f"{entry.topic} q{entry.queue_id}  commit of {d.get('offset')} by {entry.requester} ignored "
            f"({d.get('reason')}): it would undo the reset to {d.get('target')}"
        )
    if entry.kind == RecordType.COMMITLOG_EXPIRED:
        lost = [x for x in d.get("lost") or () if x[0] == entry.group]
        what = "; ".join(f"{t} q{q}: {n} messages from offset {o}" for _, t, q, o, n in lost)
        return f"retention ({d.get('reason')}) removed messages never consumed: {what or 'none'}"
    rest = {k: v for k, v in d.items() if k not in ("requester", "client")}
    return f"{entry.kind} {entry.topic} by {entry.requester or '(unknown)'} {json.dumps(rest, default=str)}"


def _cmd_history(args: argparse.Namespace) -> int:
    from es_broker.timetravel.query import HistoryEntry, TimeTravel

    since = parse_time(args.since) if args.since else None
    until = parse_time(args.until) if args.until else None
    brokers: list[str] | None = None
    if args.namesrv:
        answers = ask(
            args,
            lambda admin: admin.offset_history(
                args.group, args.topic, since, until, args.max_entries
            ),
        )
        # by the key alone: a record and the offset change it made share a seq, and the entries
        # themselves do not order
        told = sorted(
            [
                (
                    (e.time, a.broker_name, e.seq),
                    a.broker_name,
                    HistoryEntry(**dataclasses.asdict(e)),
                )
                for a in answers
                for e in a.body.entries
            ],
            key=lambda row: row[0],
        )
        entries, brokers = [e for _, _, e in told], [b for _, b, _ in told]
        for a in answers:
            if a.body.more:
                print(
                    f"{a.broker_name}: older entries left out, only the newest {args.max_entries} "
                    "of each broker are shown (--max-entries)",
                    file=sys.stderr,
                )
    else:
        with open_store(args) as store, store.read() as txn:
            entries = TimeTravel(store).history(
                txn, args.group, topic=args.topic, since=since, until=until
            )
    if args.json:
        print(
            json.dumps(
                {
                    "group": args.group,
                    "topic": args.topic,
                    "since": since,
                    "until": until,
                    "entries": [
                        e.as_dict() if brokers is None else {"broker": b, **e.as_dict()}
                        for e, b in _paired(entries, brokers)
                    ],
                },
                default=str,
            )
        )
        return 0
    scope = f"topic {args.topic}" if args.topic else "every topic"
    print(f"history of group {args.group} on {scope}: {len(entries)} entries")
    for e, b in _paired(entries, brokers):
        where = f"{b}  " if b is not None else ""
        print(f"  {format_time(e.time)}  {where}#{e.seq:<7} {describe(e)}")
    return 0


# ---------------------------------------------------------------------- acl


def acl_answer(
    data_dir: str, at: int, topic: str, group: str | None, window_ms: int
) -> dict[str, Any]:
    """`acl --at`'s answer: the load in force and the refusals around `at`, found in the audit index
    (B-416) and read by seq, from the hot log or the archive (B-408)."""
    from es_broker.config import BrokerConfig
    from es_broker.store import Store

    open_log_readonly(data_dir).close()  # FileNotFoundError without broker data
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=data_dir), readonly=True)
    try:
        return acl_answer_in(store, at, topic, group, window_ms)
    finally:
        store.close()


def acl_answer_in(
    store: Any, at: int, topic: str, group: str | None, window_ms: int
) -> dict[str, Any]:
    """`acl_answer` on an open Store."""
    from es_broker.commands.acl_audit import access_at
    from es_broker.history.reader import records_at, sources_of
    from es_broker.history.seal import time_of

    with store.read() as txn:
        indexed = store.audit.is_built(txn, store.log.last_seq)
    if not indexed:  # written before the audit index, not opened by a broker since
        return _acl_by_scan(store, at, topic, group, window_ms)
    with store.read() as txn:
        load = store.audit.load_at(txn, at)
        seqs = store.audit.denials_near(txn, at - window_ms, at + window_ms)
        seqs = sorted(seqs + ([load[0]] if load else []))
        times = {seq: time_of(store, txn, seq) for seq in seqs}
    found = records_at(store, seqs)
    items = [(seq, found[seq], times[seq]) for seq in seqs]
    answer = access_at(items, at, topic, group, window_ms=window_ms)
    answer["read_from"] = sources_of(store, seqs) or ["hot"]
    return answer


def _acl_by_scan(
    store: Any, at: int, topic: str, group: str | None, window_ms: int
) -> dict[str, Any]:
    """`acl --at` from every ACL record, archive then hot log (B-408)."""
    from es_broker.commands.acl_audit import access_at
    from es_broker.history.reader import Reading
    from es_broker.log.types import RecordType

    reading = Reading(store, types=(RecordType.ACL_LOADED, RecordType.ACCESS_DENIED))
    answer = access_at(reading.timed(), at, topic, group, window_ms=window_ms)
    answer["read_from"] = reading.sources
    return answer


def _cmd_acl(args: argparse.Namespace) -> int:
    """Who could write/read a topic at a time (the ACL load in force), and who was refused around it."""

    at = parse_time(args.at)
    answer = acl_answer(args.data_dir, at, args.topic, args.group, int(args.window * 1000))
    if args.json:
        print(json.dumps(answer))
        return 0
    load = answer["load"]
    print(
        f"topic {args.topic} at {format_time(at)}" + (f", group {args.group}" if args.group else "")
    )
    if load is None:
        print(
            "  no ACL load recorded at or before that time (ACL off, or before the first start with aclEnable)"
        )
    else:
        who = f" by {load['requester']}" if load["requester"] else ""
        print(
            f"  rules version {load['version']} loaded {format_time(load['time'])} ({load['cause']}{who}), "
            f"record #{load['seq']}, files {', '.join(p for p, _ in load['files'])}"
        )
        white = ", ".join(answer["global_white"]) or "(none)"
        print(f"  global white list (anyone from these addresses, unsigned): {white}")
        print(
            f"  {'accessKey':<24} {'write':<5} {'read':<5} {'group SUB':<9} {'topic perm':<18} "
            f"{'group perm':<18} white address (passes unchecked)"
        )
        for a in answer["accounts"]:
            group = "-" if a["group_sub"] is None else ("yes" if a["group_sub"] else "no")
            print(
                f"  {a['access_key']:<24} {'yes' if a['write'] else 'no':<5} {'yes' if a['read'] else 'no':<5} "
                f"{group:<9} {a['topic_perm']:<18} {a['group_perm'] or '-':<18} "
                f"{a['white_remote_address'] or '-'}"
            )
    print(
        f"  refused within {args.window:g} s of that time: {sum(d['count'] for d in answer['denials'])} requests"
    )
    for d in answer["denials"]:
        print(
            f"    {format_time(d['window_from'])} .. {format_time(d['window_to'])}  {d['who']:<24} "
            f"{d['host']:<16} code {d['code']:<5} x{d['count']}  (#{d['seq']})"
            + "".join(f"  {reason} x{n}" for reason, n in sorted(d.get("reasons", {}).items()))
        )
    return 0


# ---------------------------------------------------------------------- export


def _cmd_export(args: argparse.Namespace) -> int:
    from es_broker.cli.progress import progress
    from es_broker.readmodel.export import LayoutMismatch, check_layout, export
    from es_broker.schema.families import Source

    try:
        import pyarrow  # noqa: F401
    except ImportError:
        print(
            "es-broker export writes Parquet with pyarrow, which is not installed: "
            "pip install 'es-broker[export]'",
            file=sys.stderr,
        )
        return 2
    try:  # before the store and the progress bar: a refusal is one line, nothing written
        check_layout(args.out, args.cluster)
    except LayoutMismatch as exc:
        flag = "with --cluster" if exc.holds_cluster else "without --cluster"
        print(
            f"es-broker export: {exc}: export into it {flag}, or into another --out",
            file=sys.stderr,
        )
        return 2
    with open_store(args) as store, progress("export") as tell:
        node = source(store.config)
        node = Source(
            args.broker_name or node.broker,
            args.broker_role or node.role,
            node.node if args.broker_id is None else args.broker_id,
        )
        result = export(store.log, args.out, node, cluster=args.cluster, progress=tell)
    if args.json:
        print(
            json.dumps(
                {
                    "first_seq": result.first_seq,
                    "last_seq": result.last_seq,
                    "records": result.records,
                    "rows": result.rows,
                    "files": result.files,
                    "seconds": round(result.seconds, 3),
                    "records_per_s": round(result.rate),
                    "quarantined": list(result.quarantined),
                }
            )
        )
        return 0
    elif result.first_seq is None:
        print(f"nothing new: {args.out} already holds records 1..{result.last_seq}")
    else:
        rows = ", ".join(f"{k} {v}" for k, v in sorted(result.rows.items()))
        print(
            f"exported records {result.first_seq}..{result.last_seq} ({result.records}) into {args.out}: "
            f"{result.files} files; rows: {rows}; {result.rate:,.0f} records/s"
        )
    if result.quarantined:
        from es_broker.readmodel.export import QUARANTINE

        print(
            f"quarantined {len(result.quarantined)} records that could not be exported "
            f"(kept in {Path(args.out) / QUARANTINE}):"
        )
        for f in result.quarantined:
            print(f"  seq {f['seq']}  {f['type']}: {f['error']}")
    return 0


# ---------------------------------------------------------------------- parsers


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "offsets", help="the offset table at a moment, with lag (from the time index)"
    )
    add_data_dir(p)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", help="one topic (default: every topic of the group)")
    p.add_argument("--at", required=True, help=TIME_HELP)
    p.add_argument(
        "--durable",
        action="store_true",
        help="also show the compat crash-model value (last 5 s persist tick, B-133)",
    )
    p.add_argument("--json", action="store_true")
    add_cluster_options(p)
    p.set_defaults(func=_cmd_offsets)

    p = sub.add_parser("history", help="every offset change of a group, with cause and requester")
    add_data_dir(p)
    p.add_argument("--group", required=True)
    p.add_argument("--topic")
    p.add_argument("--since", help=TIME_HELP)
    p.add_argument("--until", help=TIME_HELP)
    p.add_argument("--json", action="store_true")
    add_cluster_options(p)
    p.add_argument(
        "--max-entries",
        type=int,
        default=10_000,
        help="with --namesrv: the newest entries each broker sends at most (default 10000)",
    )
    p.set_defaults(func=_cmd_history)

    p = sub.add_parser(
        "acl", help="who could write/read a topic at a time under the ACL, and who was refused"
    )
    add_data_dir(p)
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--group", "-g", help="also tell who may SUB as this consumer group")
    p.add_argument("--at", required=True, help=TIME_HELP)
    p.add_argument(
        "--window",
        type=float,
        default=300.0,
        help="seconds either side of --at whose refusal summaries are listed (default 300)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_acl)

    p = sub.add_parser(
        "export", help="write the records as Parquet, one dataset per family, by day"
    )
    add_data_dir(p, required=True)
    p.add_argument(
        "--out", required=True, help="export directory (incremental: keeps its checkpoint there)"
    )
    p.add_argument(
        "--cluster",
        action="store_true",
        help="write as one node of a cluster's export root (partitioned by broker name and brokerId), "
        "so every master and slave of a cluster can export into the same --out",
    )
    p.add_argument("--broker-name", help="the broker name rows carry (default: broker.conf's)")
    p.add_argument(
        "--broker-id", type=int, help="the node's brokerId (default: broker.conf's; 0 a master)"
    )
    p.add_argument("--broker-role", help="the role rows carry (default: broker.conf's)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_export)
