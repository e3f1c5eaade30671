"""A small client of etcd's v3 JSON gateway (httpx), for the fail-over coordinator (es_broker/ha/election.py).

Only what the coordinator needs: leases (grant, keep alive, revoke), range
reads of a key or a prefix, puts, and transactions whose compares make a
decision taken on one snapshot hold at the moment it is written. Keys and
values travel base64-encoded, 64-bit numbers as JSON strings (grpc-gateway).
Endpoints are tried in turn; any failure of them all is `EtcdUnavailable`.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import httpx

TIMEOUT = 2.0  # s per request: well below any lease the coordinator holds


class EtcdUnavailable(Exception):
    """No endpoint answered, or the answer was an error."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def prefix_end(prefix: bytes) -> bytes:
    """The range end that makes `prefix` a prefix range (etcd's clientv3.GetPrefixRangeEnd)."""
    end = bytearray(prefix)
    for i in range(len(end) - 1, -1, -1):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\0"


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: bytes
    value: bytes
    mod_revision: int
    create_revision: int
    lease: int


@dataclass(frozen=True, slots=True)
class Compare:
    """One compare of a transaction: target CREATE | MOD | VERSION | VALUE, result EQUAL | LESS | GREATER."""

    key: bytes
    target: str
    result: str
    value: int | bytes
    range_end: bytes | None = None

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": _b64(self.key), "target": self.target, "result": self.result}
        field = {
            "CREATE": "create_revision",
            "MOD": "mod_revision",
            "VERSION": "version",
            "VALUE": "value",
        }[self.target]
        v = self.value
        out[field] = _b64(v) if isinstance(v, bytes) else str(v)
        if self.range_end is not None:
            out["range_end"] = _b64(self.range_end)
        return out


@dataclass(frozen=True, slots=True)
class Put:
    key: bytes
    value: bytes
    lease: int = 0

    def json(self) -> dict[str, Any]:
        put: dict[str, Any] = {"key": _b64(self.key), "value": _b64(self.value)}
        if self.lease:
            put["lease"] = str(self.lease)
        return {"request_put": put}


def etcd_endpoints(url: str) -> list[str]:
    """The HOST:PORT endpoints of `etcd://H:P[,H:P...]` (broker.conf's ha_coordinator)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme != "etcd" or not rest:
        raise ValueError(f"ha_coordinator {url!r} is not etcd://HOST:PORT[,HOST:PORT...]")
    endpoints = [e.strip() for e in rest.split(",") if e.strip()]
    if not endpoints:
        raise ValueError("ha_coordinator names no etcd endpoint")
    return endpoints


class EtcdClient:
    """etcd v3 over its JSON gateway; `endpoints` are HOST:PORT."""

    def __init__(self, endpoints: list[str], timeout: float = TIMEOUT) -> None:
        if not endpoints:
            raise ValueError("ha_coordinator names no etcd endpoint")
        self.endpoints = list(endpoints)
        self._http = httpx.AsyncClient(timeout=timeout)

    @classmethod
    def from_url(cls, url: str) -> EtcdClient:
        """`etcd://H:P[,H:P...]` (broker.conf's ha_coordinator)."""
        return cls(etcd_endpoints(url))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        last: Exception | None = None
        for i, endpoint in enumerate(self.endpoints):
            try:
                resp = await self._http.post(f"http://{endpoint}{path}", json=body)
            except httpx.HTTPError as exc:
                last = exc
                continue
            if resp.status_code != 200:
                raise EtcdUnavailable(f"etcd {endpoint}{path}: HTTP {resp.status_code} {resp.text}")
            if i:  # the endpoint that answered first next time
                self.endpoints.insert(0, self.endpoints.pop(i))
            answer: dict[str, Any] = resp.json()
            if "error" in answer:
                raise EtcdUnavailable(f"etcd {endpoint}{path}: {answer['error']}")
            return answer
        raise EtcdUnavailable(f"no etcd endpoint of {', '.join(self.endpoints)} answered: {last}")

    # ------------------------------------------------------------------ leases
    async def grant(self, ttl_s: int) -> int:
        answer = await self._call("/v3/lease/grant", {"TTL": str(ttl_s)})
        return int(answer["ID"])

    async def keepalive(self, lease: int) -> int:
        """The lease's TTL after this renewal; 0 when it has expired (it cannot be renewed)."""
        answer = await self._call("/v3/lease/keepalive", {"ID": str(lease)})
        return int(answer.get("result", {}).get("TTL", 0) or 0)

    async def revoke(self, lease: int) -> None:
        await self._call("/v3/lease/revoke", {"ID": str(lease)})

    # ------------------------------------------------------------------ keys
    async def range(self, key: bytes, *, prefix: bool = False) -> tuple[int, list[KeyValue]]:
        """(revision of the snapshot, the key's or the prefix's key-values)."""
        body: dict[str, Any] = {"key": _b64(key)}
        if prefix:
            body["range_end"] = _b64(prefix_end(key))
        answer = await self._call("/v3/kv/range", body)
        return int(answer["header"]["revision"]), [_kv(kv) for kv in answer.get("kvs", [])]

    async def get(self, key: bytes) -> KeyValue | None:
        _, kvs = await self.range(key)
        return kvs[0] if kvs else None

    async def put(self, key: bytes, value: bytes, lease: int = 0) -> int:
        body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            body["lease"] = str(lease)
        answer = await self._call("/v3/kv/put", body)
        return int(answer["header"]["revision"])

    async def txn(self, compares: list[Compare], puts: list[Put]) -> bool:
        """Write `puts` if every compare holds; True if they were written."""
        answer = await self._call(
            "/v3/kv/txn",
            {"compare": [c.json() for c in compares], "success": [p.json() for p in puts]},
        )
        return bool(answer.get("succeeded", False))


def _kv(raw: dict[str, Any]) -> KeyValue:
    return KeyValue(
        _unb64(raw.get("key")),
        _unb64(raw.get("value")),
        int(raw.get("mod_revision", 0)),
        int(raw.get("create_revision", 0)),
        int(raw.get("lease", 0)),
    )
