"""The log's history beyond the hot log: sealed segments in a Parquet archive, snapshots (B-401..B-410)."""
