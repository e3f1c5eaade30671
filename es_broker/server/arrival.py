"""Which requests are stored in the order a connection sent them (B-140).

Every request code that appends messages to a queue: a producer's sends,
a consumer's send-back, an operator's re-drive of dead letters. Everything
else (pulls, long-polls, heartbeats, admin) takes no ticket and never waits
behind them.
"""

from __future__ import annotations

from es_broker.core.broker import ArrivalOrder, Ticket
from es_broker.remoting.codes import EsRequestCode, RequestCode

ORDERED_CODES = frozenset(
    {
        RequestCode.SEND_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
        RequestCode.CONSUMER_SEND_MSG_BACK,
        EsRequestCode.REDRIVE_DLQ,
    }
)

__all__ = ["ORDERED_CODES", "ArrivalOrder", "Ticket"]
