"""What `es-broker` prints when the world is not as it expects: one line, no traceback.

A listen address in use stops `serve` with one line naming the listener and
the address, and a non-zero exit; an `es-broker admin ...` whose reader went
away (`| head`) stops quietly, without a BrokenPipeError traceback.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from es_broker.readmodel.db import engine_error
from tests.helpers import cli
from tests.process_fixtures import _env, serve


def _one_line(done: subprocess.CompletedProcess[str], *parts: str) -> None:
    text = done.stdout + done.stderr
    assert "Traceback" not in text
    assert done.returncode != 0
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1, done.stderr
    for part in parts:
        assert part in line


def test_a_broker_port_in_use_stops_serve_with_one_line(tmp_path):
    with serve(tmp_path / "first", "--readmodel-url", "none") as first:
        done = cli(
            "serve",
            "--data-dir",
            str(tmp_path / "second"),
            "--listen",
            first.broker,
            "--namesrv-listen",
            "127.0.0.1:0",
            "--readmodel-url",
            "none",
            timeout=60,
        )
    _one_line(done, "the broker cannot listen on", first.broker, "Address already in use")


def test_a_name_server_port_in_use_stops_serve_with_one_line(tmp_path):
    with serve(tmp_path / "first", "--readmodel-url", "none") as first:
        done = cli(
            "serve",
            "--data-dir",
            str(tmp_path / "second"),
            "--listen",
            "127.0.0.1:0",
            "--namesrv-listen",
            first.namesrv,
            timeout=60,
        )
    _one_line(done, "the name server cannot listen on", first.namesrv, "Address already in use")


def test_admin_output_to_a_closed_pipe_ends_without_a_traceback(tmp_path):
    with serve(tmp_path / "data", "--readmodel-url", "none") as served:
        admin = subprocess.Popen(
            [sys.executable, "-m", "es_broker.cli", "admin", "-n", served.namesrv, "topicList"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        admin.stdout.close()  # as `| head` does once it has its lines: the reader is gone
        errors = admin.stderr.read()
        code = admin.wait(timeout=60)
    assert "Traceback" not in errors
    assert "BrokenPipeError" not in errors
    assert len(errors.strip().splitlines()) <= 1
    assert code != 0  # the output was not all written


def test_a_dashboard_port_in_use_stops_it_with_one_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        addr = f"127.0.0.1:{taken.getsockname()[1]}"
        done = cli("dashboard", "--namesrv", "127.0.0.1:9", "--listen", addr, timeout=60)
    _one_line(done, "the dashboard cannot listen on", addr, "Address already in use")


@pytest.mark.parametrize(
    "verb",
    [
        ["verify"],
        ["explain", "--group", "G", "--topic", "T"],
        ["replay", "--into", "{into}"],
        ["offsets", "--group", "G", "--at", "now"],
    ],
    ids=lambda verb: verb[0],
)
def test_an_offline_verb_on_a_directory_without_a_broker_says_so_and_creates_nothing(
    tmp_path, verb
):
    """A mistyped --data-dir: one line naming it; neither it nor replay's --into is created."""
    missing, into = tmp_path / "no-such-dir", tmp_path / "into"
    done = cli(*(a.format(into=into) for a in verb), "--data-dir", str(missing))
    _one_line(done, "no broker data in", str(missing))
    assert not missing.exists()
    assert not into.exists()


@pytest.mark.parametrize(
    "verb",
    [
        ["offsets", "--group", "G", "--at", "now"],
        ["history", "--group", "G"],
        ["explain", "--group", "G", "--topic", "T"],
    ],
    ids=lambda verb: verb[0],
)
def test_a_verb_over_the_wire_to_a_name_server_not_there_says_so_in_one_line(verb):
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        addr = f"127.0.0.1:{closed.getsockname()[1]}"
        done = cli(*verb, "--namesrv", addr, timeout=60)
    _one_line(done, f"the cluster of name server {addr}", "connect to", "failed")


def test_readmodel_verbs_say_what_the_database_says_in_one_line(tmp_path):
    # a schema not made yet: the table the question needs is not there
    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(empty).close()
    url = f"sqlite:///{empty}"
    done = cli("readmodel", "offsets", "--readmodel-url", url, "--group", "G", "--at", "now")
    _one_line(done, "readmodel offsets", url, "no such table", "readmodel sync")
    # no file at all: said so, and none made
    absent = tmp_path / "absent.sqlite"
    url = f"sqlite:///{absent}"
    done = cli("readmodel", "offsets", "--readmodel-url", url, "--group", "G", "--at", "now")
    _one_line(done, "readmodel offsets", f"no read model at {absent} yet", "readmodel sync")
    assert not absent.exists()
    # a file in a folder that is not there
    url = f"sqlite:///{tmp_path / 'nowhere' / 'rm.sqlite'}"
    done = cli("readmodel", "upgrade", "--readmodel-url", url)
    _one_line(done, "readmodel upgrade", url, "unable to open database file")
    # a server that does not answer: the URL shown without its password
    done = cli("readmodel", "upgrade", "--readmodel-url", "postgresql+psycopg://u:pw@127.0.0.1:1/d")
    _one_line(done, "readmodel upgrade", "postgresql+psycopg://u:***@127.0.0.1:1/d")
    assert "pw" not in done.stderr


def test_readmodel_on_a_driver_not_installed_names_what_to_install(tmp_path):
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("psycopg2 is installed here")
    done = cli("readmodel", "upgrade", "--readmodel-url", "postgresql+psycopg2://u@127.0.0.1:1/d")
    _one_line(done, "readmodel upgrade", "no module psycopg2", "pip install 'es-broker[postgres]'")


def test_ha_switch_on_a_broker_without_the_fail_over_says_so(tmp_path):
    with serve(tmp_path / "data", "--readmodel-url", "none") as served:
        done = cli("admin", "-n", served.namesrv, "haSwitch", "-b", served.broker, "-t", "n2")
    _one_line(done, "haSwitch", served.broker, "without the automatic fail-over", "ha_coordinator")


@contextmanager
def _addresses_held() -> Iterator[tuple[str, str]]:
    """Two addresses the test listens on, for serve's broker and name server: a serve that bound
    either before it refused to start would stop on it instead ("cannot listen", exit 1)."""
    with socket.create_server(("127.0.0.1", 0)) as a, socket.create_server(("127.0.0.1", 0)) as b:
        yield f"127.0.0.1:{a.getsockname()[1]}", f"127.0.0.1:{b.getsockname()[1]}"


def _refused_start(data_dir, *extra: str, env: dict[str, str] | None = None, said: tuple[str, ...]):
    """`es-broker serve` refused before anything started: one line, exit 2, nothing listened and
    the data directory neither locked nor made."""
    with _addresses_held() as (broker, namesrv):
        done = cli(
            "serve",
            "--data-dir",
            str(data_dir),
            "--listen",
            broker,
            "--namesrv-listen",
            namesrv,
            *extra,
            env=env,
            timeout=60,
        )
    _one_line(done, *said)
    assert done.returncode == 2
    assert "listening on" not in done.stdout
    assert not data_dir.exists()
    return done


@pytest.mark.parametrize(
    ("conf", "said"),
    [
        ("ha_coordinator=etcd://127.0.0.1:2", "ha_coordinator needs ha_node_id"),
        ("ha_coordinator=127.0.0.1:2\nha_node_id=n1", "is not etcd://HOST:PORT"),
    ],
)
def test_a_bad_ha_setting_stops_serve_with_one_line_before_anything_starts(tmp_path, conf, said):
    conf_file = tmp_path / "etcd.conf"
    conf_file.write_text(conf + "\n")
    _refused_start(tmp_path / "data", "--config", str(conf_file), said=(said,))


def test_serve_on_a_read_model_driver_not_installed_refuses_to_start_as_readmodel_says(tmp_path):
    # what Python raises for psycopg when it is not installed, in front of the installed one
    shadow = tmp_path / "without_psycopg"
    shadow.mkdir()
    (shadow / "psycopg.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'psycopg'\", name='psycopg')\n"
    )
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([str(shadow), env["PYTHONPATH"]])
    url = "postgresql+psycopg://u:pw@127.0.0.1:1/db"
    done = _refused_start(
        tmp_path / "data",
        "--readmodel-url",
        url,
        env=env,
        said=(
            "the database driver of postgresql+psycopg://u:***@127.0.0.1:1/db is not installed",
            "no module psycopg",
            "pip install 'es-broker[postgres]'",
        ),
    )
    said = cli("readmodel", "upgrade", "--readmodel-url", url, env=env)  # needs no data directory
    assert said.returncode == 2
    # the same words after the command's name: "es-broker: ..." / "es-broker readmodel upgrade: ..."
    assert done.stderr.partition(": ")[2] == said.stderr.partition(": ")[2]


def test_serve_on_a_read_model_url_sqlalchemy_has_no_driver_for_refuses_to_start(tmp_path):
    _refused_start(
        tmp_path / "data",
        "--readmodel-url",
        "postgresql+nosuchdriver://u:pw@127.0.0.1:1/db",
        said=("postgresql+nosuchdriver://u:***@127.0.0.1:1/db", "Can't load plugin"),
    )


@pytest.mark.parametrize(
    "command",
    [
        ("sync",),
        ("follow",),
        ("status",),
        ("retry",),
        ("upgrade",),
        ("offsets", "--group", "G", "--at", "now"),
    ],
    ids=lambda command: command[0],
)
def test_readmodel_on_a_url_sqlalchemy_has_no_driver_for_refuses_as_serve_does(tmp_path, command):
    url = "postgresql+nosuchdriver://u:pw@127.0.0.1:1/db"
    data_dir = tmp_path / "data"
    done = cli("readmodel", *command, "--data-dir", str(data_dir), "--readmodel-url", url)
    _one_line(done, "postgresql+nosuchdriver://u:***@127.0.0.1:1/db", "Can't load plugin")
    assert done.returncode == 2
    assert done.stderr.strip() == f"es-broker readmodel {command[0]}: {engine_error(url)}"
    assert "pw" not in done.stderr
    assert not data_dir.exists()


def test_serve_on_a_read_model_database_not_reachable_starts_the_broker(tmp_path):
    pytest.importorskip("psycopg")  # the driver is there; the database is not (port 1)
    url = "postgresql+psycopg://u:pw@127.0.0.1:1/db"
    with serve(tmp_path / "data", "--readmodel-url", url) as served:
        assert served.process.poll() is None  # listening, as its ready lines said
