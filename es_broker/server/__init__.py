"""The broker process, in three rooms.

`edge/`: the network edge (listeners, connections, TLS, each connection's answers),
which serves the dispatch table it is handed. `processors/`: the request processors,
one module per role as RocketMQ 4.9.8's broker groups them. Here, at the top: the
composition root (`main.py`, `BrokerServer`), the dispatch table of request codes to
processors (`routes.py`), the `es-broker serve` process (`serve.py`, `serve_options.py`,
`serve_access.py`, and `failover.py` under the fail-over coordinator), the name server
role (`namesrv.py`), and the background services with the tables they share with the
processors: the clients (`clients.py`), held pulls (`longpoll.py`), delay delivery,
the transaction check, sealing and /metrics.
"""
