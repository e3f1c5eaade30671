"""The store's maintenance requests mqadmin sends: DELETE_EXPIRED_COMMITLOG.

RocketMQ answers DELETE_EXPIRED_COMMITLOG at once, having armed its clean
service's next 20 passes to delete expired commit-log files whatever the hour
(`DefaultMessageStore#executeDeleteFilesManually`). es-broker starts such passes
at once (records of reason manual: files past fileReservedTime only, B-14..B-18,
B-264) and answers with what they removed within `manual_pass_answer_ms`, and
`running` if they go on (B-677).
"""

from __future__ import annotations

from es_broker.config import BrokerRole
from es_broker.core.broker import Broker
from es_broker.net.channel import Channel
from es_broker.remoting.admin_bodies import CleanPassResult
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, response_to
from es_broker.server.edge.remoting_server import Handler


class StoreProcessors:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.DELETE_EXPIRED_COMMITLOG: self.delete_expired_commitlog}

    async def delete_expired_commitlog(
        self, channel: Channel, req: RemotingCommand
    ) -> RemotingCommand:
        """Manual clean passes from now on (B-264), answered within a bound (B-677); a slave's
        files follow its master's log."""
        if self.broker.config.brokerRole == BrokerRole.SLAVE:
            return response_to(
                req,
                ResponseCode.SYSTEM_ERROR,
                "a slave keeps its master's log: delete expired commit-log files on the master",
            )
        done, running = await self.broker.manual_retention_pass(
            max(0, self.broker.config.manual_pass_answer_ms) / 1000
        )
        body = CleanPassResult(
            done.reason, tuple(done.deleted_files), done.phy_min, done.seq, running or None
        )
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())
