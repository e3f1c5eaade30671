"""A whole broker (name server role + broker) on free loopback ports inside the test's nursery."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from es_broker.config import BrokerConfig
from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting.codes import RequestCode
from es_broker.remoting.command import RemotingCommand, request
from es_broker.server.main import BrokerServer
from es_broker.server.namesrv import NameServerRole


@dataclass
class Running:
    server: BrokerServer
    namesrv_addr: str
    client: RemotingClient

    @property
    def addr(self) -> str:
        return self.server.addr

    async def call(
        self, code: int, fields: dict | None = None, body: bytes = b"", **kw
    ) -> RemotingCommand:
        return await self.client.invoke(self.addr, request(code, fields or {}, body, **kw))

    async def create_topic(self, topic: str, queues: int = 4, perm: int = 6) -> None:
        response = await self.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": topic,
                "defaultTopic": "TBW102",
                "readQueueNums": queues,
                "writeQueueNums": queues,
                "perm": perm,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": False,
            },
        )
        assert response.code == 0, response.remark


QUICK_DELAYS = " ".join(["1s"] * 18)  # every delay level 1 s: a retry comes back soon


def in_process_config(data_dir: Path, **settings: Any) -> BrokerConfig:
    """A broker's config for a test: free port, fixed RAM (so the in-memory verdicts of B-38 are
    the same on every machine)."""
    return BrokerConfig(
        storePathRootDir=str(data_dir),
        listenPort=0,
        total_physical_memory_bytes=1024**3,
        **settings,
    )


@pytest.fixture
async def running(tmp_path, nursery) -> Running:
    namesrv_port = await nursery.start(NameServerRole().run, "127.0.0.1", 0)
    namesrv = f"127.0.0.1:{namesrv_port}"
    config = in_process_config(tmp_path / "broker")
    server = await nursery.start(BrokerServer(config, [namesrv]).run, "127.0.0.1")
    yield Running(server, namesrv, RemotingClient(nursery))
    nursery.cancel_scope.cancel()
