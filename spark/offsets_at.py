"""The whole offset table of every group at a moment, with each queue's max and lag then.

    python spark/offsets_at.py --input EXPORT_DIR --at 2024-05-01T10:42:00 [--group G] [--durable] [--json]
    python spark/offsets_at.py --data-dir BROKER_DATA_DIR --at now
    spark-submit spark/offsets_at.py --input hdfs:///es-broker/export --at 1714560120000

TIME: now | epoch millis | yyyy-MM-dd#HH:mm:ss:SSS | ISO 8601. The answer
equals `es-broker offsets --at` and the SQL read model's for the same log.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import esb_spark  # noqa: E402


def main(argv: list[str] | None = None, spark=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    esb_spark.add_input_args(parser)
    parser.add_argument("--at", required=True)
    parser.add_argument("--group", help="one group (default: every group)")
    parser.add_argument(
        "--durable", action="store_true", help="also the compat crash-model value (B-133)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    at = esb_spark.parse_at(args.at)
    spark, source, owned = esb_spark.open_input(args, "es-broker offsets_at", spark)
    rows = [
        r.asDict()
        for r in esb_spark.offsets_at(source, at, group=args.group, durable=args.durable).collect()
    ]
    if args.json:
        print(json.dumps({"at": at, "queues": rows}))
    else:
        print(f"offset table at {at} ({len(rows)} queues)")
        columns = ["group", "topic", "queue_id", "offset", "max_offset", "lag"]
        columns += ["durable", "durable_lag"] if args.durable else []
        esb_spark.print_table(rows, columns + ["cause", "requester", "seq", "broker"])
    if owned:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
