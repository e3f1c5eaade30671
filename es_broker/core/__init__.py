"""The broker core in process, above the commands: the API the server and the CLI call (broker.py),
and the tools that rebuild and check projections from the log (replay.py)."""
