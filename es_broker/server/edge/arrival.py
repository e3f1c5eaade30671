"""Which requests keep, in the writer's queue, the order a connection sent them (B-140, B-312).

Every request code that appends messages to a queue: a producer's sends,
a consumer's send-back, an operator's re-drive of dead letters. And the
requests that write or read a consumer's offsets: a pull (which may carry a
commit; it waits for no earlier request, and gives its turn up once its
record is queued, before it long-polls), an offset commit, and an offset
query (which waits for the records of the requests before it).
Everything else (heartbeats, admin, route and lock requests) takes no ticket
and never waits behind them.
"""

from __future__ import annotations

from es_broker.remoting.codes import EsRequestCode, RequestCode

ORDERED_CODES = frozenset(
    {
        RequestCode.SEND_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
        RequestCode.CONSUMER_SEND_MSG_BACK,
        EsRequestCode.REDRIVE_DLQ,
        RequestCode.PULL_MESSAGE,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        RequestCode.QUERY_CONSUMER_OFFSET,
    }
)
