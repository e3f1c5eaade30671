"""Master/slave clusters of real `es-broker serve` processes on loopback, and a raw wire driver.

Processes write their output to a file (a pipe nobody reads could fill up and
stall a broker that logs while its master is away); readiness is the ready
line appearing in that file. Every wait is a bounded poll of process output
or broker state, never a fixed sleep.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting import fastjson
from es_broker.remoting import message as wire
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, request
from tests.helpers import cli_checked, wait_until
from tests.process_fixtures import _env
from tests.waiting import poll_until

_NAMESRV = re.compile(r"name server listening on (\S+)")
_BROKER = re.compile(r"listening on (\S+), data in")
START_TIMEOUT = 20.0


@dataclass
class Proc:
    """One `es-broker serve` process."""

    process: subprocess.Popen
    output: Path
    addr: str
    data_dir: Path | None = None
    args: tuple[str, ...] = ()

    def kill9(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM and wait for a clean exit."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def text(self) -> str:
        return self.output.read_text(errors="replace")


async def start(name: str, workdir: Path, args: list[str], ready: re.Pattern[str]) -> Proc:
    """Run `es-broker serve ARGS` and wait (bounded) for its ready line in its output file."""
    output = workdir / f"{name}.out"
    handle = output.open("ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "es_broker.cli", "serve", *args],
        stdout=handle,
        stderr=subprocess.STDOUT,
        env=_env(),
        cwd=workdir,
    )
    handle.close()

    def ready_line() -> re.Match[str] | None | bool:
        if process.poll() is not None:
            return True  # exited: stop waiting
        return ready.search(output.read_text(errors="replace"))

    with contextlib.suppress(AssertionError):
        m = await poll_until(ready_line, START_TIMEOUT, f"{name} ready")
        if isinstance(m, re.Match):
            return Proc(process, output, m.group(1), None, tuple(args))
    process.kill()
    process.wait()
    raise RuntimeError(
        f"{name} did not start (exit {process.returncode}):\n{output.read_text(errors='replace')}"
    )


def write_conf(path: Path, **settings: object) -> Path:
    path.write_text(
        "".join(
            f"{k}={str(v).lower() if isinstance(v, bool) else v}\n" for k, v in settings.items()
        )
    )
    return path


@dataclass
class Cluster:
    """A name server, a master and a slave of broker-a, each its own process."""

    workdir: Path
    namesrv: Proc
    master: Proc
    slave: Proc
    master_conf: Path
    slave_conf: Path
    procs: list[Proc] = field(default_factory=list)

    @property
    def master_dir(self) -> Path:
        return self.workdir / "master"

    @property
    def slave_dir(self) -> Path:
        return self.workdir / "slave"

    async def restart_master(self) -> None:
        """Start the master again on its data directory and its port (the slave follows that address)."""
        self.master = await start_master(
            self.workdir, self.namesrv.addr, self.master_conf, self.master.addr
        )
        self.procs.append(self.master)

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()

    def admin(self, *args: str) -> str:
        """`es-broker admin -n NAMESRV ARGS`; its output."""
        done = subprocess.run(
            [sys.executable, "-m", "es_broker.cli", "admin", "-n", self.namesrv.addr, *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=_env(),
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def admin_json(self, *args: str) -> Any:
        import json

        return json.loads(self.admin(*args, "--json"))


async def start_master(
    workdir: Path, namesrv: str, conf: Path, listen: str = "127.0.0.1:0"
) -> Proc:
    return await start(
        "master",
        workdir,
        [
            "--role",
            "broker",
            "--namesrv",
            namesrv,
            "--listen",
            listen,
            "--data-dir",
            str(workdir / "master"),
            "--config",
            str(conf),
            "--readmodel-url",
            "none",
        ],
        _BROKER,
    )


async def start_cluster(
    workdir: Path, *, master: dict[str, object], slave: dict[str, object]
) -> Cluster:
    """Name server, master (settings `master`), then a slave (`slave`) following it, caught up."""
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
    master_conf = write_conf(workdir / "master.conf", **master)
    slave_conf = write_conf(workdir / "slave.conf", **slave)
    m = await start_master(workdir, namesrv.addr, master_conf)
    s = await start(
        "slave",
        workdir,
        [
            "--role",
            "slave",
            "--master",
            m.addr,
            "--namesrv",
            namesrv.addr,
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            str(workdir / "slave"),
            "--config",
            str(slave_conf),
            "--readmodel-url",
            "none",
        ],
        _BROKER,
    )
    return Cluster(workdir, namesrv, m, s, master_conf, slave_conf, [namesrv, m, s])


# ---------------------------------------------------------------------- the wire


class Wire:
    """Raw RocketMQ requests through RemotingClient (what a client library would send)."""

    def __init__(self, client: RemotingClient) -> None:
        self.client = client

    async def call(
        self,
        addr: str,
        code: int,
        fields: dict[str, object] | None = None,
        body: bytes = b"",
        timeout: float = 10.0,
    ) -> RemotingCommand:
        return await self.client.invoke(addr, request(code, fields or {}, body), timeout=timeout)

    async def ok(
        self, addr: str, code: int, fields: dict[str, object] | None = None, body: bytes = b""
    ) -> RemotingCommand:
        r = await self.call(addr, code, fields, body)
        assert r.code == ResponseCode.SUCCESS, (code, r.code, r.remark)
        return r

    async def create_topic(self, addr: str, topic: str, queues: int) -> None:
        await self.ok(
            addr,
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": topic,
                "defaultTopic": "TBW102",
                "readQueueNums": queues,
                "writeQueueNums": queues,
                "perm": 6,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": False,
            },
        )

    async def send(
        self,
        addr: str,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: dict[str, str] | None = None,
    ) -> RemotingCommand:
        return await self.call(
            addr,
            RequestCode.SEND_MESSAGE_V2,
            {
                "a": "PG",
                "b": topic,
                "c": "TBW102",
                "d": 4,
                "e": queue_id,
                "f": 0,
                "g": 0,
                "h": 0,
                "i": wire.encode_properties(properties or {}).decode(),
                "j": 0,
                "k": False,
                "m": False,
            },
            body,
        )

    async def pull(
        self, addr: str, group: str, topic: str, queue_id: int, offset: int, max_nums: int = 32
    ) -> RemotingCommand:
        """PULL_MESSAGE with the subscription in the request (sysFlag bit 2), no commit, no suspension."""
        return await self.call(
            addr,
            RequestCode.PULL_MESSAGE,
            {
                "consumerGroup": group,
                "topic": topic,
                "queueId": queue_id,
                "queueOffset": offset,
                "maxMsgNums": max_nums,
                "sysFlag": 0x4,
                "commitOffset": 0,
                "suspendTimeoutMillis": 0,
                "subscription": "*",
                "subVersion": 0,
                "expressionType": "TAG",
            },
        )

    async def commit(self, addr: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        await self.ok(
            addr,
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": offset},
        )

    async def query(self, addr: str, group: str, topic: str, queue_id: int) -> int:
        r = await self.call(
            addr,
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": group, "topic": topic, "queueId": queue_id},
        )
        return r.get_long("offset", -1) if r.code == ResponseCode.SUCCESS else -1

    async def heartbeat(self, addr: str, client_id: str, group: str, topic: str) -> None:
        body = fastjson.dumps(
            {
                "clientID": client_id,
                "producerDataSet": [],
                "consumerDataSet": [
                    {
                        "groupName": group,
                        "consumeType": "CONSUME_PASSIVELY",
                        "messageModel": "CLUSTERING",
                        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                        "unitMode": False,
                        "subscriptionDataSet": [
                            {
                                "topic": topic,
                                "subString": "*",
                                "tagsSet": [],
                                "codeSet": [],
                                "subVersion": 0,
                                "expressionType": "TAG",
                                "classFilterMode": False,
                            }
                        ],
                    }
                ],
            }
        )
        await self.ok(addr, RequestCode.HEART_BEAT, body=body.encode())

    async def runtime(self, addr: str) -> dict[str, str]:
        r = await self.ok(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        return fastjson.loads(r.body)["table"]

    async def route(self, namesrv: str, topic: str) -> dict[int, str]:
        """brokerId -> address of the topic's (one) broker name, from the name server."""
        r = await self.ok(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        (data,) = fastjson.loads(r.body)["brokerDatas"]
        return {int(k): v for k, v in data["brokerAddrs"].items()}


async def caught_up(w: Wire, master: str, slave: str) -> bool:
    """The slave holds every record the master has, and the master has nothing newer in flight."""
    m, s = await w.runtime(master), await w.runtime(slave)
    # "caught up at": the master already appended the record of this catch-up (slave_caught_up)
    return (
        "caught up at" in m["haSlaves"]
        and s["haAppliedSeq"] == m["recordLogLastSeq"]
        and s["haConnected"] == "True"
    )


def bodies(response: RemotingCommand) -> list[wire.StoredMessage]:
    return wire.decode_all(response.body) if response.code == ResponseCode.SUCCESS else []


SLOW_MACHINE_MS = (
    10_000  # slaveTimeout where a test needs every send acknowledged, even on a loaded machine
)


async def verify_identical(cluster: Cluster, w: Wire) -> None:
    """Stop both brokers once the slave holds the master's last record; `verify --against` must agree."""
    await wait_until(
        "the slave holding the master's last record",
        lambda: caught_up(w, cluster.master.addr, cluster.slave.addr),
    )
    cluster.master.stop()
    cluster.slave.stop()
    done = cli_checked(
        "verify",
        "--data-dir",
        str(cluster.master_dir),
        "--against",
        str(cluster.slave_dir),
        timeout=60,
    )
    assert done.stdout.startswith("OK: every projection of")
