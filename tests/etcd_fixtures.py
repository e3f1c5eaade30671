"""etcd and broker groups under the fail-over coordinator, as real processes on loopback (B-370..B-389).

Each test starts its own etcd (Debian's etcd-server: /usr/bin/etcd) on free
ports with a temporary data directory, and skips when the binary is absent.
Nodes are `es-broker serve` processes started alike but for ha_node_id; which
of them leads is read from their runtime info, never assumed.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from es_broker.net.remoting_client import RemotingError
from tests.ha_fixtures import _BROKER, _NAMESRV, Proc, Wire, start, write_conf
from tests.waiting import poll_until

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Etcd:
    """One etcd member; stop() and start() again keep its data directory and ports."""

    data_dir: Path
    client_port: int = field(default_factory=free_port)
    peer_port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    async def start(self) -> None:
        client, peer = f"http://{self.endpoint}", f"http://127.0.0.1:{self.peer_port}"
        log = (self.data_dir.parent / "etcd.out").open("ab")
        self.process = subprocess.Popen(
            [
                ETCD,
                "--data-dir",
                str(self.data_dir),
                "--listen-client-urls",
                client,
                "--advertise-client-urls",
                client,
                "--listen-peer-urls",
                peer,
                "--initial-advertise-peer-urls",
                peer,
                "--initial-cluster",
                f"default={peer}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        await poll_until(self.answers, 30, "etcd answering")

    async def answers(self) -> bool:
        try:
            async with httpx.AsyncClient(timeout=1.0) as http:
                r = await http.post(f"http://{self.endpoint}/v3/kv/range", json={"key": "eA=="})
                return r.status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


async def start_etcd(workdir: Path) -> Etcd:
    if shutil.which("etcd") is None and not Path(ETCD).exists():
        pytest.skip("etcd is not installed (Debian package etcd-server)")
    etcd = Etcd(workdir / "etcd-data")
    await etcd.start()
    return etcd


@dataclass
class Group:
    """etcd, a name server and the nodes of broker-a, each its own process."""

    workdir: Path
    etcd: Etcd
    namesrv: Proc
    settings: dict[str, object]
    nodes: dict[str, Proc] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)

    def conf(self, name: str) -> Path:
        return write_conf(
            self.workdir / f"{name}.conf",
            ha_coordinator=f"etcd://{self.etcd.endpoint}",
            ha_node_id=name,
            **self.settings,
        )

    async def start_node(self, name: str) -> Proc:
        """Start (or restart, on its data directory and port) node `name`."""
        port = self.ports.setdefault(name, free_port())
        proc = await start(
            name,
            self.workdir,
            [
                "--role",
                "broker",
                "--namesrv",
                self.namesrv.addr,
                "--listen",
                f"127.0.0.1:{port}",
                "--data-dir",
                str(self.workdir / name),
                "--config",
                str(self.conf(name)),
                "--readmodel-url",
                "none",
            ],
            _BROKER,
        )
        proc.data_dir = self.workdir / name
        self.nodes[name] = proc
        return proc

    def stop_all(self) -> None:
        for proc in self.nodes.values():
            proc.stop()
        self.namesrv.stop()
        self.etcd.stop()

    def alive(self) -> dict[str, Proc]:
        return {n: p for n, p in self.nodes.items() if p.process.poll() is None}


async def start_group(workdir: Path, names: list[str], **settings: object) -> Group:
    etcd = await start_etcd(workdir)
    namesrv = await start(
        "namesrv",
        workdir,
        [
            "--role",
            "namesrv",
            "--namesrv-listen",
            "127.0.0.1:0",
            "--data-dir",
            str(workdir / "namesrv"),
        ],
        _NAMESRV,
    )
    group = Group(workdir, etcd, namesrv, settings)
    for name in names:
        await group.start_node(name)
    return group


async def runtime_or_none(w: Wire, addr: str) -> dict[str, str] | None:
    try:
        return await w.runtime(addr)
    except (RemotingError, AssertionError, OSError):
        return None


async def leader(w: Wire, group: Group, *, not_node: str | None = None) -> tuple[str, Proc]:
    """The node that leads and takes writes now (its fence clear), waited for."""

    async def find() -> tuple[str, Proc] | None:
        for name, proc in group.alive().items():
            if name == not_node:
                continue
            rt = await runtime_or_none(w, proc.addr)
            if rt and rt.get("haLeader") == name and rt.get("haFence") == "":
                return name, proc
        return None

    return await poll_until(find, 60, "a leader taking writes")


async def following(w: Wire, group: Group, name: str, leader_addr: str) -> bool:
    """Node `name` follows `leader_addr` and holds its last record."""
    rt = await runtime_or_none(w, group.nodes[name].addr)
    lrt = await runtime_or_none(w, leader_addr)
    return bool(
        rt
        and lrt
        and rt.get("haMasterAddr") == leader_addr
        and rt.get("haConnected") == "True"
        and rt.get("haAppliedSeq") == lrt.get("recordLogLastSeq")
    )


def etcd_keys(etcd: Etcd, prefix: str = "/es-broker/") -> dict[str, str]:
    done = subprocess.run(
        ["etcdctl", "--endpoints", etcd.endpoint, "get", "--prefix", prefix, "-w", "json"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    import base64

    kvs = json.loads(done.stdout).get("kvs", [])
    return {
        base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", "")).decode()
        for kv in kvs
    }
