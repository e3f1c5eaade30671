"""Which processor answers each request code: the broker's dispatch table.

As 4.9.8's BrokerController.registerProcessor, one line per role: each
processor names the codes it serves (its `handlers()`), and this table puts
them together, in order: where two tables name a code, the later one serves
it. The listener (server/edge/remoting_server.py) is handed the result and
knows no processor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from es_broker.ha.master import ReplicationMaster
from es_broker.ha.term import HaTerm
from es_broker.remoting.codes import EsRequestCode
from es_broker.server.edge.remoting_server import Handler, Start
from es_broker.server.processors.build import BrokerProcessors
from es_broker.server.processors.pop import PopProcessor
from es_broker.server.sealing import HistorySealing


@dataclass(frozen=True, slots=True)
class Routes:
    """What a broker's listener serves: `handlers`, every request code with its handler, and
    `starts`, the codes whose first part the listener runs as their frame is decoded."""

    handlers: dict[int, Handler]
    starts: dict[int, Start]


def broker_routes(
    processors: BrokerProcessors,
    pop: PopProcessor,
    sealing: HistorySealing,
    replication: ReplicationMaster | None,
    ha: HaTerm | None,
) -> Routes:
    """The dispatch table of a built broker: its processors, RocketMQ 5's pop codes, a master's replication, the HA switch
    under the fail-over coordinator, and HISTORY_ARCHIVE."""
    p = processors
    tables: list[Mapping[int, Handler]] = [
        p.send.handlers(),  # SendMessageProcessor
        p.pull.handlers(),  # PullMessageProcessor
        p.consumer_manage.handlers(),  # ConsumerManageProcessor
        p.client_manage.handlers(),  # ClientManageProcessor (and the queue locks)
        p.query_message.handlers(),  # QueryMessageProcessor
        p.admin.handlers(),  # AdminBrokerProcessor
        p.end_transaction.handlers(),  # EndTransactionProcessor, OPEN_TRANSACTIONS
        p.retry.handlers(),  # send-back, delay offsets, dead letters, a message's journey
        p.replies.handlers(),  # ReplyMessageProcessor
        pop.handlers(),  # RocketMQ 5's Pop-, AckMessage- and ChangeInvisibleTimeProcessor
        p.time_travel.handlers(),  # time travel: offsets at a moment, history, explain
        p.store.handlers(),  # DELETE_EXPIRED_COMMITLOG
        p.stats.handlers(),  # message counts
        replication.handlers() if replication is not None else {},  # a slave's fetches
        {EsRequestCode.HA_SWITCH: ha.switch} if ha is not None else {},
        p.acl.handlers(),  # the ACL codes of AdminBrokerProcessor
        sealing.handlers(),  # HISTORY_ARCHIVE
    ]
    handlers = {code: handler for table in tables for code, handler in table.items()}
    # sends, pulls and offset commits run their first part as their frame is decoded (B-140,
    # B-312), where the processor's own handler serves the code (not one a later table replaced)
    firsts = {**p.send.starts(), **p.pull.starts(), **p.consumer_manage.starts()}
    starts = {
        code: start for code, (handler, start) in firsts.items() if handlers.get(code) == handler
    }
    return Routes(handlers, starts)
