"""/metrics tells the states an operator alerts on (B-360), from broker processes in them: a
registration refused by an ACL name server (the deployment path of B-314..B-316) and a full disk
(B-150..B-154). Scraped directly; tests/test_metrics_prometheus.py does it through Prometheus.
"""

from __future__ import annotations

import re

from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting.codes import ResponseCode
from tests.acl_fixtures import acl_conf
from tests.disk_fixtures import fill, small_tmpfs
from tests.ha_fixtures import _NAMESRV, Wire, start, start_master, write_conf
from tests.process_fixtures import serve
from tests.test_metrics_prometheus import CONF, sample, scrape
from tests.waiting import poll_until

METRICS_LINE = re.compile(r"metrics on (http://\S+/metrics)")
BODY = b"m" * 60_000  # large enough that every send needs fresh pages
MAX_SENDS = 400


async def test_b360_a_refused_registration_is_a_zero_and_a_refused_peer_state(tmp_path, nursery):
    """B-360: a broker without an admin account, registering with a name server that has ACL,
    shows esbroker_nameserver_registration_ok 0 (and 1 never), so `RegistrationRefused` fires."""
    conf, _ = acl_conf(tmp_path, peer=None)
    namesrv = await start(
        "namesrv",
        tmp_path,
        ["--role", "namesrv", "--namesrv-listen", "127.0.0.1:0", "--config", str(conf)],
        _NAMESRV,
    )
    procs = [namesrv]
    try:
        settings = dict(line.split("=", 1) for line in CONF)
        broker = await start_master(
            tmp_path, namesrv.addr, write_conf(tmp_path / "plain.conf", **settings)
        )
        procs.append(broker)
        status = await Wire(RemotingClient(nursery)).runtime(broker.addr)
        assert status["nameServerRegistration"].startswith(f"refused by {namesrv.addr}: 1 ")
        found = await poll_until(
            lambda: METRICS_LINE.findall(broker.text()), what="the broker's metrics line"
        )
        text = scrape(found[-1])
        assert sample(text, "esbroker_nameserver_registration_ok") == 0
    finally:
        for proc in reversed(procs):
            proc.stop()


async def test_b360_a_full_disk_is_esbroker_disk_full_with_its_refused_writes(tmp_path, nursery):
    """B-360: on a full disk /metrics says esbroker_disk_full 1 and counts the refused writes; once
    space returns and a write goes through, 0 again."""
    client = Wire(RemotingClient(nursery))
    with small_tmpfs(tmp_path / "disk", 32) as disk:
        log_file = tmp_path / "broker.log"
        with serve(
            disk / "data", "--readmodel-url", "none", conf=CONF, log_file=log_file
        ) as broker:
            url = METRICS_LINE.findall(log_file.read_text())[-1]
            await client.create_topic(broker.broker, "T", 1)
            assert sample(scrape(url), "esbroker_disk_full") == 0
            filler = fill(disk)
            refused = None
            for i in range(MAX_SENDS):
                sent = await client.send(broker.broker, "T", 0, BODY + b"%d" % i)
                if sent.code != ResponseCode.SUCCESS:
                    refused = sent
                    break
            assert refused is not None, "the disk never filled"
            assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
            text = scrape(url)
            assert sample(text, "esbroker_disk_full") == 1
            assert sample(text, "esbroker_refused_writes_while_full_total") >= 1
            filler.unlink()

            async def written() -> bool:
                sent = await client.send(broker.broker, "T", 0, b"after")
                return sent.code == ResponseCode.SUCCESS

            await poll_until(written, what="a send once space returned")
            assert sample(scrape(url), "esbroker_disk_full") == 0
