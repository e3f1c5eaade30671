"""The broker's request processors, one module per role as RocketMQ 4.9.8's broker groups them.

RocketMQ's (org.apache.rocketmq.broker.processor): `send.py` (SendMessageProcessor),
`pull.py` (PullMessageProcessor; `pull_codes.py` its answer codes), `query.py`
(QueryMessageProcessor), `client_manage.py` (ClientManageProcessor), `consumer_manage.py`
(ConsumerManageProcessor), `end_transaction.py` (EndTransactionProcessor), `admin.py`
(AdminBrokerProcessor), `reply.py` (ReplyMessageProcessor), `acl.py` (the ACL codes of
AdminBrokerProcessor), `retry.py` (send-back, delay offsets, dead letters). es-broker's
own: `time_travel.py` (offsets at a moment, history, explain), `stats.py` (message counts),
`store.py` (store maintenance). `subscription.py` checks a consumer's subscription for
`pull.py` and `client_manage.py`; `common.py` holds what several processors share;
`build.py` makes one of each for a broker. Which code goes to which processor is the
dispatch table of server/routes.py.
"""
