"""The broker with its leaf projections left out of the shape's records, for a measurement only.

Loaded through PYTHONPATH (as bench/cpu_sampler is): with ES_BROKER_BENCH_WITHOUT_LEAVES=1 in the
environment of `es-broker serve`, the writer applies a send's, a delivery's and a commit's record
(`messages_stored`, `messages_delivered`, `offset_committed`) to every projection but the six that
only index them for lookups and counts: the key index, the time index, the message trace, the
audit, the stats and the runtime rates. Everything else runs as shipped. What the broker then
spends a message, against the same run without this, is what those projections cost it under the
load (bench/README.md, "What the lookup projections cost under the shape"). A broker run this way
keeps incomplete indexes: use a data directory made for the run and thrown away after it.

    ES_BROKER_BENCH_WITHOUT_LEAVES=1 python bench/rocketmq_shape.py --inflight 8 64 \
        --seconds 10 --broker-pythonpath $PWD:$PWD/bench/without_leaves
"""

import os
import sys

LEAVES = frozenset(
    {
        "KeyIndexProjection",
        "TimeIndexProjection",
        "MessageTraceProjection",
        "AuditProjection",
        "StatsProjection",
        "RecordRates",
    }
)
SHAPE_RECORDS = frozenset({"messages_stored", "messages_delivered", "offset_committed"})

if os.environ.get("ES_BROKER_BENCH_WITHOUT_LEAVES") and "serve" in sys.argv:
    from es_broker.log.store import RecordLog

    _appliers_of = RecordLog._appliers_of

    def _without_leaves(self, kind):
        if kind not in SHAPE_RECORDS:
            return _appliers_of(self, kind)
        every = self.projections  # found as RecordLog._appliers_of finds them, the leaves' left out
        self.projections = [p for p in every if type(p).__name__ not in LEAVES]
        try:
            return _appliers_of(self, kind)
        finally:
            self.projections = every

    RecordLog._appliers_of = _without_leaves
    print("bench: the lookup projections left out of the shape's records", file=sys.stderr)
