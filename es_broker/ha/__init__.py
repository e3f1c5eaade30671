"""Master and slave: a slave follows its master's record log (slave.py), the master serves it (master.py).

The wire between them is protocol.py; the slave's own state (offset commits
taken while the master is away) is `es_broker.commands.slave_offsets`.
"""
