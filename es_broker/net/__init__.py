"""A remoting connection in either direction, over trio/anyio sockets.

One connection type below both sides: the broker's listener, the name server,
replication, fail-over and the ACL's peers use the same `Channel` (one socket
around the sans-IO `es_broker.remoting.connection.Connection`) as the client
library, and the same `RemotingClient` when they ask a peer. `es_broker.client`
builds producers and consumers on top of it; `es_broker.server` builds the
broker on top of it; neither imports the other.
"""
