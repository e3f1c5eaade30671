"""Time travel over the record log: the offset table and queue bounds at any moment (B-131..B-133, S-1).

`es_broker.projections.time_index` is an LMDB projection that maps broker time to log positions and keeps
each queue's max per position; `query` answers "offsets at T", "durable
offsets at T" and "history of G" from it and from the offset table's own
history, in O(log n) per queue; `timeparse` reads the TIME arguments.
"""
