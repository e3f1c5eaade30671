"""A name server and a broker whose listeners record every request, and checks of the requests' signatures."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import trio

from es_broker.acl.signing import ES_SIGNATURE, SIGNATURE, verify_v1
from es_broker.client import Credentials
from es_broker.net.channel import Channel
from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting.codes import RequestCode
from es_broker.remoting.command import ACCESS_KEY, RemotingCommand
from es_broker.server.edge.remoting_server import Handler, RemotingServer
from es_broker.server.main import BrokerServer
from es_broker.server.namesrv import NameServerRole
from tests.server_fixtures import QUICK_DELAYS, Running, in_process_config

CREDS = Credentials("client-ak", "client-secret")
TIMEOUT = 30.0
# What the broker itself sends the name server: not a client's request.
BROKER_TO_NAMESRV = {RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER}


@dataclass
class Recorder:
    """Every request the listeners received (the test's own setup requests cleared away)."""

    seen: list[RemotingCommand] = field(default_factory=list)
    _changed: trio.Event = field(default_factory=trio.Event)

    def tap(self, server: RemotingServer) -> None:
        """Record every request that passes the listener's edge checks, before its handler runs.

        Each entry of the handler table is wrapped; the codes whose first part
        runs in the read loop (`starts`) then run as tasks, through the table.
        """

        def recording(handler: Handler) -> Handler:
            async def record(channel: Channel, command: RemotingCommand) -> RemotingCommand | None:
                if command.code not in BROKER_TO_NAMESRV:
                    self.seen.append(command)
                    self._changed.set()
                    self._changed = trio.Event()
                return await handler(channel, command)

            return record

        server.handlers = {code: recording(handler) for code, handler in server.handlers.items()}
        server.starts = {}

    def codes(self) -> set[int]:
        return {command.code for command in self.seen}

    async def wait_for(self, *codes: int, timeout: float = TIMEOUT) -> None:
        """Until every code has been received at least once."""
        with trio.fail_after(timeout):
            while True:
                changed = self._changed  # taken before the check, so no request is missed
                if set(codes) <= self.codes():
                    return
                await changed.wait()


@dataclass
class Recorded(Running):
    recorder: Recorder = field(default_factory=Recorder)


@pytest.fixture
async def recorded(tmp_path, nursery) -> Recorded:
    """A name server and a broker in process (retry delays of 1 s), both recording their requests."""
    recorder = Recorder()
    namesrv_role = NameServerRole()
    recorder.tap(namesrv_role.remoting)
    namesrv_port = await nursery.start(namesrv_role.run, "127.0.0.1", 0)
    namesrv = f"127.0.0.1:{namesrv_port}"
    server = BrokerServer(
        in_process_config(tmp_path / "broker", messageDelayLevel=QUICK_DELAYS), [namesrv]
    )
    recorder.tap(server.remoting)
    await nursery.start(server.run, "127.0.0.1")
    yield Recorded(server, namesrv, RemotingClient(nursery), recorder)
    nursery.cancel_scope.cancel()


async def recorded_topic(env: Recorded, topic: str) -> str:
    """Create the topic (the broker answers once the name server has it), then forget the setup requests."""
    await env.create_topic(topic)
    env.recorder.seen.clear()
    return topic


def assert_all_signed_by(seen: list[RemotingCommand], credentials: Credentials) -> None:
    assert seen, "no request was received"
    for command in seen:
        assert command.ext_fields.get(ACCESS_KEY) == credentials.access_key, (
            f"code {command.code} unsigned"
        )
        assert verify_v1(command.code, command.ext_fields, command.body, credentials.secret_key), (
            f"code {command.code}: the signature does not verify"
        )


def assert_none_signed(seen: list[RemotingCommand]) -> None:
    assert seen, "no request was received"
    for command in seen:
        assert not {ACCESS_KEY, SIGNATURE, ES_SIGNATURE} & command.ext_fields.keys(), command.code
