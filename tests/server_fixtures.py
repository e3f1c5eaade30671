"""A whole broker (name server role + broker) on free loopback ports inside the test's nursery."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from es_broker.client.remoting_client import RemotingClient
from es_broker.config import BrokerConfig
from es_broker.remoting.codes import RequestCode
from es_broker.remoting.command import RemotingCommand, request
from es_broker.server.main import BrokerServer, NameServerRole


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


@pytest.fixture
async def running(tmp_path, nursery) -> Running:
    namesrv_port = await nursery.start(NameServerRole().run, "127.0.0.1", 0)
    namesrv = f"127.0.0.1:{namesrv_port}"
    config = BrokerConfig(
        storePathRootDir=str(tmp_path / "broker"), listenPort=0, total_physical_memory_bytes=1024**3
    )
    server = await nursery.start(BrokerServer(config, [namesrv]).run, "127.0.0.1")
    yield Running(server, namesrv, RemotingClient(nursery))
    nursery.cancel_scope.cancel()
