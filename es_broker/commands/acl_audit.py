"""The audit of access, event-sourced (B-190..B-194): ACL loads and summaries of refusals as records.

`AclAudit` is the broker's ACL on-change hook (`AccessControl(on_change=...)`).
Every load of the broker's rules (startup, file change, admin request) becomes
one `acl_loaded` record: the version, cause, requester, the files (path and
SHA-256 of their bytes), the data version, the global white list and every
account, with a *fingerprint* of its secret, never the secret. The hook is
synchronous and the startup load happens before the broker runs, so the
snapshot is taken in the hook and handed through a memory channel to a trio
task that appends it once the broker runs.

Refused requests are never recorded one by one: every `aclDenialSummaryInterval`
seconds the task takes `AccessControl.take_denials()` and, if anything was
refused, appends one `access_denied` record with the window (broker time, ms)
and a row per (who, host, request code) with its count. A summary the disk
refuses (full disk) is kept, bounded like the counter, and merged into the next.
A clean shutdown writes what is left (loads not yet appended, the last window)
in one write transaction after the writer stopped (`close`).

Fingerprint: the first 16 hex digits of HMAC-SHA256(salt, accessKey NUL secret),
the salt being 32 random bytes made once per data directory (`acl_audit.salt`,
mode 0600) and kept out of the log. So two loads of one broker tell whether an
account's secret changed, while whoever reads only the log, the SQL read model
or the export (Spark users) cannot test guesses of a weak secret against it.
Each `acl_loaded` names the salt by `salt_id` (SHA-256 of the salt, 8 hex
digits): fingerprints are comparable when their salt ids are equal.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import os
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import trio

from es_broker.acl.addresses import parse_pattern
from es_broker.acl.plain import Account, Perm, PlainAcl, group_resource
from es_broker.clock import Clock
from es_broker.commands.errors import BrokerError
from es_broker.log import AppendContext, RecordLog, StoreFullError, WriterClosed
from es_broker.log.records import Record, RecordOutOfRange
from es_broker.log.types import AccessDenied, AclLoaded, RecordType

log = logging.getLogger(__name__)

SALT_FILE = "acl_audit.salt"
FINGERPRINT = "hmac-sha256/16"  # how `secret_fp` is computed (module docstring)
ROWS_MAX = 4096  # distinct (who, host, code) in one summary: AccessControl's DENIAL_KEYS_MAX
OVERFLOW = ("<overflow>", "<overflow>")  # AccessControl's key for counts past the bound
LOAD_RETRY = 1.0  # seconds between tries of a load the disk refused


class DenialSource(Protocol):
    def take_denials(self) -> Counter[tuple[str, str, int]]: ...

    def take_reasons(self) -> Counter[tuple[str, str, int, str]]: ...


def load_salt(data_dir: str | Path) -> bytes:
    """The data directory's fingerprint salt, made (32 random bytes, 0600) on first use."""
    path = Path(data_dir) / SALT_FILE
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    salt = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(salt)
    return salt


def salt_id(salt: bytes) -> str:
    return hashlib.sha256(salt).hexdigest()[:8]


def fingerprint(salt: bytes, access_key: str, secret_key: str) -> str:
    """16 hex digits that change when the secret changes and do not reveal it (module docstring)."""
    return hmac.new(
        salt, access_key.encode() + b"\0" + secret_key.encode(), hashlib.sha256
    ).hexdigest()[:16]


def load_fields(
    acl: PlainAcl,
    cause: str,
    requester: str | None,
    version: int,
    salt: bytes,
    listener: str = "broker",
) -> dict[str, Any]:
    """The fields of an `acl_loaded` record for the rules now in force (no secret among them)."""
    accounts = []
    for key in sorted(acl.accounts):
        account = acl.accounts[key]
        topics = sorted((name, Perm.name(p)) for name, p in account.topic_perms())
        groups = sorted((name, Perm.name(p)) for name, p in account.group_perms())
        accounts.append(
            {
                "access_key": key,
                "secret_fp": fingerprint(salt, key, account.secret_key),
                "admin": account.admin,
                "white_remote_address": account.white_remote_address.text,
                "default_topic_perm": Perm.name(account.default_topic_perm),
                "default_group_perm": Perm.name(account.default_group_perm),
                "topic_perms": [list(t) for t in topics],
                "group_perms": [list(g) for g in groups],
            }
        )
    dv = acl.data_version
    return {
        "listener": listener,
        "version": version,
        "cause": cause,
        "requester": requester or "",
        "files": [[f.path, f.digest] for f in acl.files],
        "data_version": [dv.timestamp, dv.counter],
        "global_white": [p.text for p in acl.global_white_remote_addresses],
        "fingerprint": FINGERPRINT,
        "salt_id": salt_id(salt),
        "accounts": accounts,
    }


def bounded_merge(
    into: Counter[tuple[str, str, int]], more: Mapping[tuple[str, str, int], int]
) -> None:
    """Add counts, keeping at most ROWS_MAX keys: later new keys go under <overflow> as AccessControl does."""
    for key, n in more.items():
        if key not in into and len(into) >= ROWS_MAX:
            key = (*OVERFLOW, key[2])
        into[key] += n


def denial_record(
    counts: Mapping[tuple[str, str, int], int],
    window_from: int,
    now: int,
    interval_s: int,
    acl_version: int,
    listener: str = "broker",
    reasons: Mapping[tuple[str, str, int, str], int] | None = None,
) -> Record:
    rows = [[who, host, int(code), int(n)] for (who, host, code), n in sorted(counts.items())]
    why = [[w, h, int(c), r, int(n)] for (w, h, c, r), n in sorted((reasons or {}).items())]
    return AccessDenied(
        listener=listener,
        window_from=window_from,
        window_to=now,
        interval_s=interval_s,
        acl_version=acl_version,
        requests=sum(int(n) for n in counts.values()),
        rows=rows,
        reasons=why or None,
    ).to_record(now)


class AclAudit:
    """The broker's ACL on-change hook and its recorder task (one per broker with aclEnable, not a slave)."""

    def __init__(self, salt: bytes, interval_s: int = 60, listener: str = "broker") -> None:
        if interval_s <= 0:
            raise ValueError(
                f"aclDenialSummaryInterval must be positive (seconds), got {interval_s}"
            )
        self.salt = salt
        self.interval_s = interval_s
        self.listener = listener
        self.version = (
            0  # equals AccessControl.version: the hook is called once per version, from the first
        )
        self._send, self._recv = trio.open_memory_channel[tuple[int | None, dict[str, Any]]](
            math.inf
        )
        self._loads: list[
            Record | tuple[int | None, dict[str, Any]]
        ] = []  # received, not yet appended
        self._kept: Counter[tuple[str, str, int]] = Counter()  # refusals taken and not yet recorded
        self._kept_reasons: Counter[tuple[str, str, int, str]] = Counter()  # their reasons (B-347)
        self._window_from: int | None = None
        self._submit: Callable[[Callable[[AppendContext], Any]], Awaitable[Any]] | None = None
        self._clock: Clock | None = None
        self._access: DenialSource | None = None
        self._flushing = trio.Lock()
        self.recorded_loads = 0
        self.recorded_summaries = 0

    @classmethod
    def for_data_dir(cls, data_dir: str | Path, interval_s: int) -> AclAudit:
        return cls(load_salt(data_dir), interval_s)

    # -- the hook (synchronous) -------------------------------------------------------------------
    def on_change(self, acl: PlainAcl, cause: Any, requester: str | None) -> None:
        """AccessControl's OnChange: snapshot the rules now, append them from the recorder task."""
        self.version += 1
        fields = load_fields(
            acl,
            str(getattr(cause, "value", cause)),
            requester,
            self.version,
            self.salt,
            self.listener,
        )
        # startup: stamped when appended
        ts = self._clock.now_ms() if self._clock is not None else None
        self._send.send_nowait((ts, fields))

    # -- the recorder task ------------------------------------------------------------------------
    async def run(
        self,
        submit: Callable[[Callable[[AppendContext], Any]], Awaitable[Any]],
        clock: Clock,
        access: DenialSource,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Append loads as they come and a summary of refusals every interval, until cancelled."""
        self._submit, self._clock, self._access = submit, clock, access
        self._window_from = clock.now_ms()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._load_loop)
            task_status.started()
            while True:
                # the summary period itself, not a wait on a condition
                await trio.sleep(self.interval_s)
                await self.flush()

    async def _load_loop(self) -> None:
        async for item in self._recv:
            self._loads.append(item)
            while self._loads:
                if await self._append_load(self._loads[0]):
                    self._loads.pop(0)
                else:
                    await trio.sleep(LOAD_RETRY)  # a full disk: try again, the load is not lost

    def _load_record(self, item: Record | tuple[int | None, dict[str, Any]]) -> Record:
        if isinstance(item, dict):
            return item
        ts, fields = item
        assert self._clock is not None
        return AclLoaded(**fields).to_record(ts if ts is not None else self._clock.now_ms())

    async def _append_load(self, item: Record | tuple[int | None, dict[str, Any]]) -> bool:
        assert self._submit is not None
        try:
            record = self._load_record(item)
            await self._submit(lambda ctx: ctx.append(record))
        except RecordOutOfRange as exc:  # cannot happen with bounded files; never retried
            log.error("ACL load version %s not recorded: %s", record_version(item), exc)
            return True
        except (BrokerError, WriterClosed) as exc:
            log.warning(
                "ACL load version %s not recorded yet: %s",
                record_version(item),
                getattr(exc, "remark", exc),
            )
            return False
        self.recorded_loads += 1
        return True

    async def flush(self) -> int:
        """Record the refusals counted since the last summary, if any; the seq, or 0 (none, or kept)."""
        if self._access is None or self._clock is None or self._submit is None:
            return 0
        async with self._flushing:
            bounded_merge(self._kept, self._access.take_denials())
            self._kept_reasons.update(self._access.take_reasons())  # keys are _kept's, so bounded
            now = self._clock.now_ms()
            if not self._kept:
                self._window_from = now
                return 0
            try:
                record = denial_record(
                    self._kept,
                    self._window_from or now,
                    now,
                    self.interval_s,
                    self.version,
                    self.listener,
                    self._kept_reasons,
                )
                seq = await self._submit(lambda ctx: ctx.append(record))
            except (
                BrokerError,
                WriterClosed,
            ) as exc:  # a full disk, shutting down: kept for the next one
                log.warning(
                    "summary of %d refused requests not recorded yet: %s",
                    sum(self._kept.values()),
                    getattr(exc, "remark", exc),
                )
                return 0
            self._kept = Counter()
            self._kept_reasons = Counter()
            self._window_from = now
            self.recorded_summaries += 1
            return int(seq)

    def close(self, record_log: RecordLog) -> None:
        """At a clean shutdown, after the writer stopped: append the loads and refusals left, in one txn."""
        if self._clock is None:
            return
        items = list(self._loads)
        while True:
            try:
                items.append(self._recv.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
        records = [self._load_record(i) for i in items]
        if self._access is not None:
            bounded_merge(self._kept, self._access.take_denials())
            self._kept_reasons.update(self._access.take_reasons())
        if self._kept:
            now = self._clock.now_ms()
            records.append(
                denial_record(
                    self._kept,
                    self._window_from or now,
                    now,
                    self.interval_s,
                    self.version,
                    self.listener,
                    self._kept_reasons,
                )
            )
        if not records:
            return

        def job(ctx: AppendContext) -> int:
            return max(ctx.append(r) for r in records)

        try:
            [(ok, value)] = record_log.write_batch([job])
        except StoreFullError as exc:
            log.warning(
                "at shutdown, %d ACL audit records not recorded (disk full: %s)",
                len(records),
                exc.reason,
            )
            return
        if not ok:
            log.warning("at shutdown, %d ACL audit records not recorded: %s", len(records), value)
            return
        self._loads, self._kept, self._kept_reasons = [], Counter(), Counter()


def record_version(item: Any) -> Any:
    return item.get("version") if isinstance(item, dict) else item[1].get("version")


# ---------------------------------------------------------------------- reading the records back


@dataclass(frozen=True, slots=True)
class Verdict:
    access_key: str
    admin: bool
    white_remote_address: (
        str  # requests from a matching address pass unsigned and unchecked (B-170)
    )
    write: bool  # PUB on the topic
    read: bool  # SUB on the topic
    group_sub: bool | None  # SUB on the group (None: no group asked)
    topic_perm: str  # the perm that decided, and where it came from
    group_perm: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "access_key": self.access_key,
            "admin": self.admin,
            "white_remote_address": self.white_remote_address,
            "write": self.write,
            "read": self.read,
            "group_sub": self.group_sub,
            "topic_perm": self.topic_perm,
            "group_perm": self.group_perm,
        }


def account_of(entry: Mapping[str, Any]) -> Account:
    """An Account (plain.py) from an `acl_loaded` account entry; its secret is unknown and empty."""
    perms = {name: Perm.NAMES[p] for name, p in entry.get("topic_perms") or ()}
    perms.update(
        {group_resource(name): Perm.NAMES[p] for name, p in entry.get("group_perms") or ()}
    )
    return Account(
        access_key=entry["access_key"],
        secret_key="",
        white_remote_address=parse_pattern(entry.get("white_remote_address") or None),
        admin=bool(entry.get("admin")),
        default_topic_perm=Perm.NAMES[entry["default_topic_perm"]],
        default_group_perm=Perm.NAMES[entry["default_group_perm"]],
        resource_perms=perms,
    )


def _perm_text(account: Account, resource: str) -> str:
    if account.has_every_perm:
        return "admin (all)"
    own = account.resource_perms.get(resource)
    return (
        f"{Perm.name(own)} (own)"
        if own is not None
        else f"{Perm.name(account.perm_for(resource))} (default)"
    )


def verdicts(load: Mapping[str, Any], topic: str, group: str | None = None) -> list[Verdict]:
    out = []
    for entry in load.get("accounts") or ():
        account = account_of(entry)
        gres = group_resource(group) if group else None
        out.append(
            Verdict(
                account.access_key,
                account.admin,
                account.white_remote_address.text,
                account.may(topic, Perm.PUB),
                account.may(topic, Perm.SUB),
                account.may(gres, Perm.SUB) if gres else None,
                _perm_text(account, topic),
                _perm_text(account, gres) if gres else None,
            )
        )
    return out


def access_at(
    records: Iterable[tuple[int, Record]] | Iterable[tuple[int, Record, int]],
    at: int,
    topic: str,
    group: str | None = None,
    window_ms: int = 300_000,
) -> dict[str, Any]:
    """Who could write/read `topic` at time `at` (effective time, B-132), and the refusals around it.

    `records` are (seq, record), or (seq, record, effective time) when the
    reader knows it (the archive's rows, B-408), so they may be only the ACL's.
    """
    running = 0  # effective time: the largest ts so far (families.RunningTime, the time index)
    load: tuple[int, int, Record] | None = None
    denials: list[dict[str, Any]] = []
    for item in records:
        seq, record = item[0], item[1]
        known = item[2] if len(item) > 2 else 0
        running = time = max(running, known, int(record.get("ts") or 0), 0)
        kind = record.get("type")
        if kind == RecordType.ACL_LOADED and time <= at:
            load = (seq, time, record)
        elif kind == RecordType.ACCESS_DENIED:
            lo, hi = int(record.get("window_from", time)), int(record.get("window_to", time))
            if lo <= at + window_ms and hi >= at - window_ms:
                why: dict[tuple[str, str, int], dict[str, int]] = {}
                # why each was refused, e.g. an admin code signed RocketMQ's way (B-347)
                for w, h, c, reason, n in record.get("reasons") or ():
                    why.setdefault((w, h, int(c)), {})[reason] = int(n)
                denials += [
                    {
                        "seq": seq,
                        "window_from": lo,
                        "window_to": hi,
                        "who": who,
                        "host": host,
                        "code": code,
                        "count": n,
                        "reasons": why.get((who, host, int(code)), {}),
                    }
                    for who, host, code, n in record.get("rows") or ()
                ]
    answer: dict[str, Any] = {
        "topic": topic,
        "group": group,
        "at": at,
        "window_ms": window_ms,
        "load": None,
        "global_white": [],
        "accounts": [],
        "denials": denials,
    }
    if load is not None:
        seq, time, record = load
        answer.update(
            load={
                "seq": seq,
                "time": time,
                "version": record.get("version"),
                "cause": record.get("cause"),
                "requester": record.get("requester"),
                "files": record.get("files"),
                "data_version": record.get("data_version"),
            },
            global_white=list(record.get("global_white") or ()),
            accounts=[v.as_dict() for v in verdicts(record, topic, group)],
        )
    return answer
