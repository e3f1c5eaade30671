"""Shared fixtures: a real broker core on a temporary data directory and a manual clock."""

from __future__ import annotations

import compileall
from pathlib import Path

import pytest
import trio

from es_broker.clock import ManualClock
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker

START = 1_700_000_000_000


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def config(tmp_path) -> BrokerConfig:
    # RAM is fixed so the "in memory" verdicts (B-38) do not depend on the test machine
    return BrokerConfig(
        storePathRootDir=str(tmp_path / "store"), total_physical_memory_bytes=1024**3
    )


@pytest.fixture
async def broker(config, clock, nursery):
    b = Broker.open(config.storePathRootDir, config, clock)
    await nursery.start(b.run)
    yield b
    nursery.cancel_scope.cancel()


async def make_topic(broker: Broker, topic: str = "T", queues: int = 4, perm: int = 6) -> str:
    await broker.update_topic(
        {"topicName": topic, "readQueueNums": queues, "writeQueueNums": queues, "perm": perm}
    )
    return topic


@pytest.fixture
def anyio_backend():
    return "trio"


def pytest_configure(config):
    """Byte-compile the package once before the suite runs. Hundreds of tests start es-broker
    processes (serve, the CLI, the read model); on a machine that sets PYTHONDONTWRITEBYTECODE
    each of them would compile every module from source again, about 0.7 s of CPU per process.
    Python reads existing bytecode whatever that variable says, so one pass here serves them all."""
    compileall.compile_dir(Path(__file__).resolve().parent.parent / "es_broker", quiet=2)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """A test marked `anyio` runs under anyio's plugin (on each backend its module's
    `anyio_backend` gives), not under pytest-trio, whose trio_mode marks every async test."""
    for item in items:
        if item.get_closest_marker("anyio") is not None:
            item.own_markers[:] = [m for m in item.own_markers if m.name != "trio"]


__all__ = ["START", "make_topic", "trio"]

from tests.credential_fixtures import recorded  # noqa: E402,F401  (a broker recording its requests)
from tests.process_fixtures import process_running, served  # noqa: E402,F401  (a broker in a real process)
from tests.server_fixtures import running  # noqa: E402,F401  (a whole broker over TCP, in process)
from tests.tls_fixtures import certs  # noqa: E402,F401  (a throwaway CA and server certificate)
