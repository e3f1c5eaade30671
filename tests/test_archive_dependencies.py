"""Sealing is part of the product: what it needs comes with `pip install es-broker`, and a
sealing that seals nothing says which condition held it back (not full, a consumer behind,
not before the cut-off)."""

from __future__ import annotations

import ast
import json
import re
import sys
import tomllib
from importlib.metadata import packages_distributions

from es_broker.client import SendStatus, SyncProducer
from tests.helpers import cli
from tests.process_fixtures import ROOT, serve

# what seals (offline and in a running master) and what sets bodies aside when an HA node rejoins
SEALING = (
    "es_broker/history",
    "es_broker/ha",
    "es_broker/cli/history.py",
    "es_broker/server/seal_process.py",
)
SEGMENT = 8
CONF = [f"history_segment_records={SEGMENT}"]
NO_READMODEL = ("--readmodel-url", "none")
FAR = "4102444800000"  # 2100-01-01: every record is before it


def _imported_distributions(paths: tuple[str, ...]) -> set[str]:
    """The distributions of the third-party modules the files import, in functions too."""
    files = [p for path in paths for p in sorted((ROOT / path).rglob("*.py")) or [ROOT / path]]
    tops: set[str] = set()
    for file in files:
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Import):
                tops.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                tops.add(node.module.split(".")[0])
    third = tops - set(sys.stdlib_module_names) - {"es_broker", "__future__"}
    found = packages_distributions()
    return {_normal(d) for top in third for d in found.get(top, [top])}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_what_sealing_imports_is_installed_with_es_broker():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {_normal(re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0]) for d in project["dependencies"]}
    assert "pyarrow" in _imported_distributions(SEALING)
    assert _imported_distributions(SEALING) <= base
    assert project["optional-dependencies"]["export"] == []  # the old extra still resolves


def _send(namesrv: str, count: int) -> None:
    with SyncProducer(namesrv, "SealPG", client_ip="127.0.0.1") as producer:
        for i in range(count):
            assert producer.send("SealT", b"m%d" % i).status == SendStatus.SEND_OK


def test_a_running_master_says_its_next_segment_is_not_full(tmp_path):
    big = 1000  # more records than a fresh broker and one send write
    with serve(tmp_path / "data", *NO_READMODEL, conf=[f"history_segment_records={big}"]) as served:
        _send(served.namesrv, 1)
        done = cli("archive", "-b", served.broker, "--before", FAR)
        assert done.returncode == 0, done.stderr
        assert "nothing to seal" in done.stdout
        assert "is not full (the log ends at #" in done.stdout, done.stdout
        answer = json.loads(cli("archive", "-b", served.broker, "--before", FAR, "--json").stdout)
    assert answer["sealed"] == [] and answer["held_back"]["reason"] == "not_full"
    assert answer["held_back"]["first_seq"] == 1
    assert answer["held_back"]["last_seq"] == big
    assert answer["held_back"]["log_end"] < big


def test_a_stopped_directory_names_the_consumer_behind_or_the_cut_off(tmp_path):
    data_dir = tmp_path / "data"
    conf = tmp_path / "broker.conf"
    conf.write_text("\n".join(CONF) + "\n")
    with serve(data_dir, *NO_READMODEL, conf=CONF) as served:
        _send(served.namesrv, 3 * SEGMENT)
    d = ("--data-dir", str(data_dir), "--config", str(conf))
    export = tmp_path / "export"  # an export that has exported nothing yet
    behind = cli("archive", *d, "--before", FAR, "--export-dir", str(export))
    assert behind.returncode == 0, behind.stderr
    assert f"is not yet read by the export to {export} (at #0)" in behind.stdout, behind.stdout
    early = cli("archive", *d, "--before", "1")  # 1 ms after the epoch: nothing is before it
    assert early.returncode == 0, early.stderr
    assert "ends with a record of" in early.stdout and "not before" in early.stdout, early.stdout
