"""The broker's and the name server's network edge: listeners, connections, their answers.

`remoting_server.py` accepts connections and runs each one's read loop, under the
limits of `EdgeLimits`; `tls.py` decides TLS or plain text from a connection's first
bytes; `outbox.py` writes a connection's answers; `arrival.py` names the requests that
keep their connection's order in the writer's queue; `malloc.py` hands freed memory
back to the system. The edge serves the dispatch table it is given ({code: handler});
it imports none of the processors that fill it.
"""
