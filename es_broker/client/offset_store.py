"""Client offset stores (B-39, B-41, B-43): where a push consumer keeps what it consumed.

CLUSTERING keeps offsets in memory and writes them to the queue's broker;
BROADCASTING keeps them in a JSON file of this client, the broker never sees them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Protocol

import anyio

from es_broker.client.config import MASTER_ID
from es_broker.client.instance import ClientInstance, FoundBroker
from es_broker.net.remoting_client import RemotingError
from es_broker.remoting.bean import Bean
from es_broker.remoting.bodies import MessageQueue
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.errors import BodyDecodeError
from es_broker.remoting.headers import (
    QueryConsumerOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from es_broker.remoting.response_headers import QueryConsumerOffsetResponseHeader

log = logging.getLogger(__name__)

NO_OFFSET = -1  # the broker has none (B-39)
UNKNOWN = -2  # the broker could not be asked (B-39)


class ReadOffsetType(Enum):
    READ_FROM_MEMORY = "READ_FROM_MEMORY"
    READ_FROM_STORE = "READ_FROM_STORE"
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"


class OffsetStore(Protocol):
    """What the push consumer needs from an offset store."""

    async def load(self) -> None: ...

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None: ...

    async def read_offset(self, mq: MessageQueue, how: ReadOffsetType) -> int: ...

    async def persist_all(self, mqs: Collection[MessageQueue]) -> None: ...

    async def persist(self, mq: MessageQueue, oneway: bool = True) -> None: ...

    def remove_offset(self, mq: MessageQueue) -> None: ...

    def offsets(self) -> dict[MessageQueue, int]: ...


class _MemoryTable:
    def __init__(self) -> None:
        self.table: dict[MessageQueue, int] = {}

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        """Absent: set; present: raise only if increase_only, else overwrite (B-41)."""
        current = self.table.get(mq)
        if current is None or not increase_only or offset > current:
            self.table[mq] = offset

    def offsets(self) -> dict[MessageQueue, int]:
        return dict(self.table)


class RemoteBrokerOffsetStore(_MemoryTable):
    """CLUSTERING: in memory, read from and written to the master of the queue's broker (B-41)."""

    def __init__(self, instance: ClientInstance, group: str, timeout: float = 5.0) -> None:
        super().__init__()
        self.instance = instance
        self.group = group
        self.timeout = timeout

    async def load(self) -> None:
        """Nothing to load: the broker is asked per queue when it is assigned."""

    async def read_offset(self, mq: MessageQueue, how: ReadOffsetType) -> int:
        """Memory, or the broker: its offset, -1 for any refusal, -2 if it cannot be asked (B-39)."""
        if how != ReadOffsetType.READ_FROM_STORE:
            offset = self.table.get(mq)
            if offset is not None or how == ReadOffsetType.READ_FROM_MEMORY:
                return NO_OFFSET if offset is None else offset
        found = await self._find(mq)
        if found is None:
            return UNKNOWN
        header = QueryConsumerOffsetRequestHeader(
            consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id
        )
        try:
            response = await self.instance.invoke(
                found.addr,
                self.instance.request(RequestCode.QUERY_CONSUMER_OFFSET, header),
                self.timeout,
            )
        except RemotingError as exc:
            log.warning("query offset of %s: %s", mq, exc)
            return UNKNOWN
        if response.code != ResponseCode.SUCCESS:
            return NO_OFFSET
        offset = QueryConsumerOffsetResponseHeader.of(response).offset
        offset = NO_OFFSET if offset is None else offset
        self.update_offset(mq, offset, increase_only=False)  # a read overwrites memory (B-39)
        return offset

    async def _find(self, mq: MessageQueue) -> FoundBroker | None:
        """The master; when the address table has none, refresh the route and take any broker of the name (B-113)."""
        found = self.instance.find_broker_address_in_subscribe(mq.broker_name, MASTER_ID, True)
        if found is None:
            await self.instance.update_route(mq.topic)
            found = self.instance.find_broker_address_in_subscribe(mq.broker_name, MASTER_ID, False)
        return found

    async def persist_all(self, mqs: Collection[MessageQueue]) -> None:
        """UPDATE_CONSUMER_OFFSET oneway for each held queue; forget the others (B-41)."""
        for mq, offset in list(self.table.items()):
            if mq in mqs:
                await self._update_to_broker(mq, offset, oneway=True)
            else:
                del self.table[mq]

    async def persist(self, mq: MessageQueue, oneway: bool = True) -> None:
        """Send one queue's offset (oneway, as Java; or waiting for the answer)."""
        offset = self.table.get(mq)
        if offset is not None:
            await self._update_to_broker(mq, offset, oneway)

    async def _update_to_broker(self, mq: MessageQueue, offset: int, oneway: bool) -> None:
        found = await self._find(mq)
        if found is None:
            log.warning("no broker for %s, offset %d not persisted", mq, offset)
            return
        header = UpdateConsumerOffsetRequestHeader(
            consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id, commit_offset=offset
        )
        try:
            if oneway:
                await self.instance.invoke_oneway(
                    found.addr,
                    self.instance.request(RequestCode.UPDATE_CONSUMER_OFFSET, header, oneway=True),
                )
            else:
                await self.instance.invoke(
                    found.addr,
                    self.instance.request(RequestCode.UPDATE_CONSUMER_OFFSET, header),
                    self.timeout,
                )
        except RemotingError as exc:
            log.warning("persist offset %d of %s: %s", offset, mq, exc)

    def remove_offset(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)


@dataclass(frozen=True, slots=True)
class OffsetSerializeWrapper(Bean):
    """The local offsets file: `{"offsetTable":{{mq}:offset,...}}` in fastjson's object-key form."""

    offset_table: dict[MessageQueue, int] = field(default_factory=dict)


def default_offset_store_dir() -> Path:
    """`$HOME/.rocketmq_offsets`, Java's rocketmq.client.localOffsetStoreDir default (B-07)."""
    return Path.home() / ".rocketmq_offsets"


class LocalFileOffsetStore(_MemoryTable):
    """BROADCASTING: `<dir>/<clientId>/<group>/offsets.json`, rewritten by `persist_all` (B-43)."""

    def __init__(self, directory: str | Path | None, client_id: str, group: str) -> None:
        super().__init__()
        self.path = (
            Path(directory or default_offset_store_dir()) / client_id / group / "offsets.json"
        )

    async def load(self) -> None:
        self.table.update(await anyio.to_thread.run_sync(self._read_file))

    async def read_offset(self, mq: MessageQueue, how: ReadOffsetType) -> int:
        """Memory, or the file's value; -1 when it has none (never -2, B-43)."""
        if how != ReadOffsetType.READ_FROM_STORE:
            offset = self.table.get(mq)
            if offset is not None or how == ReadOffsetType.READ_FROM_MEMORY:
                return NO_OFFSET if offset is None else offset
        offset = (await anyio.to_thread.run_sync(self._read_file)).get(mq)
        if offset is None:
            return NO_OFFSET
        self.update_offset(mq, offset, increase_only=False)
        return offset

    async def persist_all(self, mqs: Collection[MessageQueue]) -> None:
        if not mqs:
            return
        body = OffsetSerializeWrapper(
            {mq: off for mq, off in self.table.items() if mq in mqs}
        ).encode()
        await anyio.to_thread.run_sync(self._write_file, body)

    async def persist(self, mq: MessageQueue, oneway: bool = True) -> None:
        """Nothing: the file is written whole by `persist_all` (as Java)."""

    def remove_offset(self, mq: MessageQueue) -> None:
        """Nothing: a broadcasting client keeps every queue's offset (as Java)."""

    def _read_file(self) -> dict[MessageQueue, int]:
        for candidate in (self.path, self.path.with_name(self.path.name + ".bak")):
            try:
                text = candidate.read_bytes()
            except OSError:
                continue
            if not text.strip():
                continue
            try:
                return OffsetSerializeWrapper.decode(text).offset_table
            except BodyDecodeError as exc:
                log.warning("offsets file %s is unreadable: %s", candidate, exc)
        return {}

    def _write_file(self, body: bytes) -> None:
        """MixAll#string2File: write tmp, keep the old content as .bak, replace (B-07)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(body)
        if self.path.exists():
            self.path.with_name(self.path.name + ".bak").write_bytes(self.path.read_bytes())
        os.replace(tmp, self.path)
