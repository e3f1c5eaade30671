"""What a serving broker process has imported: nothing that serving does not use.

The start of `es-broker serve` is mostly imports, so libraries of other verbs
stay out of the broker process: the SQL read model (SQLAlchemy, Alembic) runs
in the follower's own process, Parquet export (pyarrow) and Spark belong to
other commands, and YAML is parsed only when ACL is on.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.process_fixtures import _BROKER, _env

# `es-broker serve`, answering SIGUSR1 with one line: the modules it has imported so far
SERVE_LISTING_MODULES = """
import signal, sys
signal.signal(signal.SIGUSR1, lambda *_: print("MODULES", *sorted(sys.modules), flush=True))
from es_broker.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _imported(module: str, present: set[str]) -> bool:
    return any(m == module or m.startswith(module + ".") for m in present)


@pytest.fixture(scope="module")
def serving_modules(tmp_path_factory) -> Iterator[set[str]]:
    """The modules of an `es-broker serve` process (read-model follower on) once it serves."""
    data_dir = tmp_path_factory.mktemp("start") / "data"
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            SERVE_LISTING_MODULES,
            "serve",
            "--data-dir",
            str(data_dir),
            "--listen",
            "127.0.0.1:0",
            "--namesrv-listen",
            "127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(),
    )
    try:
        lines = iter(process.stdout)
        if not any(_BROKER.search(line) for line in lines):
            raise RuntimeError(f"es-broker serve did not start (exit {process.wait()})")
        process.send_signal(signal.SIGUSR1)
        listed = next((line.split()[1:] for line in lines if line.startswith("MODULES ")), None)
        assert listed is not None, f"no module list (exit {process.poll()})"
        yield set(listed)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.mark.parametrize(
    "module",
    ["sqlalchemy", "alembic", "es_broker.readmodel.follower", "es_broker.readmodel.models"],
)
def test_a_serving_broker_leaves_the_sql_read_model_to_its_follower_process(
    serving_modules, module
):
    assert "es_broker.server.main" in serving_modules
    assert not _imported(module, serving_modules)


@pytest.mark.parametrize("module", ["pyarrow", "pyspark", "es_broker.readmodel.export"])
def test_a_serving_broker_does_not_import_export_or_spark(serving_modules, module):
    assert not _imported(module, serving_modules)


def test_a_serving_broker_without_acl_does_not_import_yaml(serving_modules):
    assert "es_broker.acl.plain" in serving_modules  # the ACL code is there, its file format is not
    assert not _imported("yaml", serving_modules)


def test_a_serving_broker_loads_the_sql92_parser_only_for_a_sql92_subscription(serving_modules):
    assert "es_broker.commands.sql92" in serving_modules  # the filter code is there (B-214)
    assert not _imported("lark", serving_modules)
