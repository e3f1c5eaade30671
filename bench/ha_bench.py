"""Master/slave benchmark: what a slave costs a producer, and how fast a slave catches up.

Run: python bench/ha_bench.py [--messages 50000] [--sync 2000]

Real `es-broker serve` processes on loopback (name server, master, slave),
the same as the HA tests start. For each master role (ASYNC_MASTER,
SYNC_MASTER) with a slave attached: N messages of 1 KiB produced in batches
of 32 with 8 batches in flight, then `--sync` single sends one at a time for
p50/p99, then the N messages read back in reads of 32 from the master and
from the slave (a slave journals each read for the master). Then a slave is started from nothing against a master that holds the
N messages, and the time until it holds the master's last record gives the
catch-up rate.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.wire_bench import es_consume, es_produce, es_sync_latency, percentile  # noqa: E402
from es_broker.net.remoting_client import RemotingClient  # noqa: E402
from tests.ha_fixtures import _BROKER as BROKER_READY  # noqa: E402
from tests.ha_fixtures import Wire, caught_up, start, start_cluster, wait_until  # noqa: E402

QUEUES = 8


async def produce_with_slave(role: str, n: int, sync: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        cluster = await start_cluster(Path(d), master={"brokerRole": role}, slave={})
        try:
            async with trio.open_nursery() as nursery:
                w = Wire(RemotingClient(nursery))
                m, s = cluster.master.addr, cluster.slave.addr
                await wait_until("caught up", lambda: caught_up(w, m, s), timeout=60)
                for topic in ("Bench", "Sync"):
                    await w.create_topic(m, topic, QUEUES)
                nursery.cancel_scope.cancel()
            rate = await es_produce(m, n, 32, 8)
            latencies = await es_sync_latency(m, sync)
            async with trio.open_nursery() as nursery:
                w = Wire(RemotingClient(nursery))
                await wait_until("caught up", lambda: caught_up(w, m, s), timeout=60)
                nursery.cancel_scope.cancel()
            from_master = await es_consume(m, n // 32 * 32)
            # each read is also journalled for the master
            from_slave = await es_consume(s, n // 32 * 32)
        finally:
            cluster.stop_all()
    return {
        "produce": rate,
        "p50": percentile(latencies, 0.5) * 1000,
        "p99": percentile(latencies, 0.99) * 1000,
        "master_read": from_master,
        "slave_read": from_slave,
    }


async def catch_up(n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        workdir = Path(d)
        cluster = await start_cluster(workdir, master={"brokerRole": "ASYNC_MASTER"}, slave={})
        try:
            cluster.slave.stop()  # the slave comes back empty once the master holds N messages
            async with trio.open_nursery() as nursery:
                w = Wire(RemotingClient(nursery))
                await w.create_topic(cluster.master.addr, "Bench", QUEUES)
                nursery.cancel_scope.cancel()
            await es_produce(cluster.master.addr, n, 32, 8)
            async with trio.open_nursery() as nursery:
                w = Wire(RemotingClient(nursery))
                records = int((await w.runtime(cluster.master.addr))["recordLogLastSeq"])
                begin = time.perf_counter()
                slave = await start(
                    "slave2",
                    workdir,
                    [
                        "--role",
                        "slave",
                        "--master",
                        cluster.master.addr,
                        "--namesrv",
                        cluster.namesrv.addr,
                        "--listen",
                        "127.0.0.1:0",
                        "--data-dir",
                        str(workdir / "slave2"),
                        "--readmodel-url",
                        "none",
                    ],
                    BROKER_READY,
                )
                cluster.procs.append(slave)
                await wait_until(
                    "the new slave caught up",
                    lambda: caught_up(w, cluster.master.addr, slave.addr),
                    timeout=600,
                )
                elapsed = time.perf_counter() - begin
                nursery.cancel_scope.cancel()
        finally:
            cluster.stop_all()
    return {"records": records, "seconds": elapsed, "messages_per_s": n / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--sync", type=int, default=2000)
    args = parser.parse_args()
    rows = {
        role: trio.run(produce_with_slave, role, args.messages, args.sync)
        for role in ("ASYNC_MASTER", "SYNC_MASTER")
    }
    print(
        f"{args.messages} messages of 1 KiB, batches of 32, 8 in flight; {args.sync} single sends"
    )
    print(
        "| master role | produce msg/s | single send p50 ms | p99 ms | read master msg/s | read slave msg/s |"
    )
    print("|---|---|---|---|---|---|")
    for role, r in rows.items():
        print(
            f"| {role} | {r['produce']:,.0f} | {r['p50']:.3f} | {r['p99']:.3f} | {r['master_read']:,.0f} "
            f"| {r['slave_read']:,.0f} |"
        )
    c = trio.run(catch_up, args.messages)
    print(
        f"\nslave from empty: {c['records']:,} records ({args.messages:,} messages) in {c['seconds']:.1f} s, "
        f"{c['messages_per_s']:,.0f} messages/s"
    )


if __name__ == "__main__":
    main()
