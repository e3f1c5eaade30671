"""`explain` after a server-side reset, through a broker process and the CLI (B-504).

The reported case: a group committed 10 on each queue, then
`admin resetOffset -g G -t T --to-earliest --mode server_side` moved it back
to 0. `history` listed `10 -> 0 (reset)`; `explain` (of the data directory
and over `--namesrv`) said `-1 -> 10 (client_commit)`. Both must name the reset.
"""

from __future__ import annotations

import json

from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import request
from tests.helpers import cli_ok, numbered, produce, topic_ready
from tests.process_fixtures import serve


async def test_b504_explain_names_a_server_side_reset_as_history_does(tmp_path, nursery):
    with serve(tmp_path / "data") as broker:
        await topic_ready(broker, "T", 1)
        await produce(broker, nursery, "T", numbered("m", 10))
        client = RemotingClient(nursery)
        committed = await client.invoke(
            broker.broker,
            request(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": "G", "topic": "T", "queueId": 0, "commitOffset": 10},
            ),
            timeout=10,
        )
        assert committed.code == ResponseCode.SUCCESS, committed.remark
        await cli_ok(
            "admin", "-n", broker.namesrv, "resetOffset", "-g", "G", "-t", "T",
            "--to-earliest", "--mode", "server_side",
        )  # fmt: skip

        done = await cli_ok(
            "history", "--data-dir", str(broker.data_dir), "--group", "G", "--topic", "T", "--json"
        )
        entries = json.loads(done.stdout)["entries"]
        changes = [e for e in entries if e["kind"] == "offset_change"]
        last = changes[-1]
        assert (last["old"], last["new"], last["cause"]) == (10, 0, "reset")

        done = await cli_ok(
            "explain", "--data-dir", str(broker.data_dir), "--group", "G", "--topic", "T", "--json"
        )
        (q,) = json.loads(done.stdout)["queues"]
        latest = q["latest_change"]
        assert (latest["old"], latest["new"], latest["cause"]) == (10, 0, "reset"), latest
        assert latest["seq"] == last["seq"] and latest["requester"] == last["requester"]
        assert (q["current_offset"], q["changes"]) == (0, len(changes))

        done = await cli_ok("explain", "--namesrv", broker.namesrv, "-g", "G", "-t", "T")
        assert "latest change" in done.stdout and "10 -> 0 by" in done.stdout, done.stdout
        assert "(reset); 2 changes in all" in done.stdout, done.stdout
