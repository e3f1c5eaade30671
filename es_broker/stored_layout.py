"""The marks of RocketMQ's stored-message encoding that the commit log reads (docs/protocol.md §8.1).

`es_broker/remoting/message.py` encodes and decodes the stored message;
`es_broker/log/chunks.py` finds a message's start in the chunks by its MAGICCODE
and reads its PHYSICALOFFSET. Both take these numbers from here, below them, so
the log needs nothing of the wire protocol.
"""

MAGIC_CODE = -626843481  # 0xDAA320A7, the 4 bytes after TOTALSIZE
QUEUE_OFFSET_AT = 20  # QUEUEOFFSET's byte position (IPv4 hosts)
PHYSICAL_OFFSET_AT = QUEUE_OFFSET_AT + 8  # PHYSICALOFFSET follows QUEUEOFFSET
