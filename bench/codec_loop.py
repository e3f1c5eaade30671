"""The codec part of one synchronous send, N times, for instruction counts (callgrind).

Run: python bench/codec_loop.py N [STEPS]

What the broker does to a SEND_MESSAGE_V2 of 1 KiB besides storing it: the
frame in and decoded (recv), its declared shape checked (check), the V1 view of
its header (v1), the header fields read (acc), the response built (resp) and
encoded (send). STEPS (comma-separated, default all) picks some of them; count
N = 0 and N = 2000 under callgrind and divide the difference by 2000:

    valgrind --tool=callgrind --callgrind-out-file=/dev/null python bench/codec_loop.py 2000 2>&1 | grep refs
    valgrind --tool=callgrind --callgrind-out-file=/dev/null python bench/codec_loop.py 0 2>&1 | grep refs
"""

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from es_broker.remoting.codes import RequestCode  # noqa: E402
from es_broker.remoting.command import request, response_to  # noqa: E402
from es_broker.remoting.connection import Connection  # noqa: E402
from es_broker.remoting.frames import encode_frame  # noqa: E402
from es_broker.remoting.message import encode_properties  # noqa: E402
from es_broker.remoting.requests import check, v1_fields  # noqa: E402

try:
    from es_broker.remoting.command import with_ext_fields
except ImportError:

    def with_ext_fields(cmd, fields):
        return dataclasses.replace(cmd, ext_fields=fields)


props = encode_properties({"TAGS": "A"}).decode()
fields = {
    "a": "BENCH",
    "b": "Sync",
    "c": "TBW102",
    "d": 4,
    "e": 3,
    "f": 0,
    "g": 1700000000000,
    "h": 0,
    "i": props,
}
data = encode_frame(
    request(RequestCode.SEND_MESSAGE_V2, fields, b"x" * 1024, opaque=77, version=409)
)
conn = Connection()
steps = (
    set(sys.argv[2].split(","))
    if len(sys.argv) > 2
    else {"recv", "check", "v1", "acc", "resp", "send"}
)
conn.receive_data(data)
req0 = conn.next_event()
h = with_ext_fields(req0, v1_fields(req0))
resp = response_to(
    req0,
    0,
    None,
    {
        "msgId": "7F00000100002A9F0000000000000000",
        "queueId": 3,
        "queueOffset": 0,
        "MSG_REGION": "DefaultRegion",
        "TRACE_ON": "true",
    },
)
req = req0
for i in range(int(sys.argv[1])):
    if "recv" in steps:
        conn.receive_data(data)
        req = conn.next_event()
    if "check" in steps:
        assert check(req) is None
    if "v1" in steps:
        h = with_ext_fields(req, v1_fields(req))
    if "acc" in steps:
        h.require_str("topic")
        h.require_int("queueId")
        h.require_int("sysFlag")
        h.require_long("bornTimestamp")
    if "resp" in steps:
        resp = response_to(
            req,
            0,
            None,
            {
                "msgId": "7F00000100002A9F0000000000000000",
                "queueId": 3,
                "queueOffset": i,
                "MSG_REGION": "DefaultRegion",
                "TRACE_ON": "true",
            },
        )
    if "send" in steps:
        conn.send(resp)
