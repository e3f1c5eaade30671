"""The busiest plain modules, built from their own source (es_broker/compiled.py, WHOLE).

setup.py builds each module of WHOLE from its .py with Cython and links into it the SHA-256 of
that .py. The finder es_broker installs runs the built module only while it is the .py's: an
edited source runs as Python until it is built again, and ES_BROKER_PURE_PYTHON=1 runs every one
of them from its source. That the built modules and their sources write the same log and the
same projections is checked by tests/test_compiled_identity.py
(test_both_paths_write_identical_logs_and_projections), which runs a history both ways.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import logging
import os
import subprocess
import sys
from pathlib import Path

from es_broker import compiled
from tests.process_fixtures import ROOT


def _source(name: str) -> Path:
    return ROOT / (name.replace(".", "/") + ".py")


def _built(name: str) -> list[Path]:
    source = _source(name)
    return sorted(source.parent.glob(source.stem + ".cpython-*.so"))


def test_every_module_named_is_a_module_of_the_package():
    assert len(set(compiled.WHOLE)) == len(compiled.WHOLE)
    for name in compiled.WHOLE:
        assert _source(name).is_file(), name
        assert name not in compiled.MODULES


def test_each_module_runs_built_when_built_from_its_source_else_from_it():
    for name in compiled.WHOLE:
        module = importlib.import_module(name)
        if compiled.pure_python_forced() or not _built(name):
            assert module.__file__ is not None and module.__file__.endswith(".py"), name
            assert not compiled.whole_active().get(name), name
        else:
            assert module.__file__ is not None and module.__file__.endswith(".so"), name
            assert compiled.whole_active()[name] is True, name
            assert compiled.built_from(module.__file__) == compiled.source_digest(_source(name))


def _which(tmp_path: Path, source_text: bytes, built_text: bytes) -> str | None:
    source, built = tmp_path / "mod.py", tmp_path / "mod.cpython-311-x86_64-linux-gnu.so"
    source.write_bytes(source_text)
    built.write_bytes(b"\x7fELF" + b"\x00" * 64 + built_text + b"\x00" * 64)
    return compiled._which("es_broker.mod", str(built), str(source))


def test_the_built_module_runs_only_while_its_mark_is_its_source_digest(tmp_path, monkeypatch):
    monkeypatch.delenv(compiled.ENV, raising=False)
    text = b"X = 1\n"
    digest = compiled.source_digest_of(text)
    assert _which(tmp_path, text, compiled.SOURCE_MARK + digest.encode()) is None
    edited = _which(tmp_path, b"X = 2\n", compiled.SOURCE_MARK + digest.encode())
    assert edited is not None and "another version of its source" in edited
    unmarked = _which(tmp_path, text, b"no mark here")
    assert unmarked == "built without its source's mark"
    monkeypatch.setenv(compiled.ENV, "1")
    assert _which(tmp_path, text, compiled.SOURCE_MARK + digest.encode()) == f"{compiled.ENV}=1"


def test_a_built_module_without_its_source_beside_it_runs(tmp_path, monkeypatch):
    monkeypatch.delenv(compiled.ENV, raising=False)
    built = tmp_path / "mod.cpython-311-x86_64-linux-gnu.so"
    built.write_bytes(b"anything")
    assert compiled._which("es_broker.mod", str(built), str(tmp_path / "mod.py")) is None


def _file_of(name: str, pure: bool) -> str:
    env = dict(os.environ, **{compiled.ENV: "1" if pure else "0"})
    done = subprocess.run(
        [sys.executable, "-c", f"import {name} as m; print(m.__file__)"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


def test_pure_python_forced_runs_each_module_from_its_source():
    name = "es_broker.log.store"
    assert _file_of(name, pure=True) == str(_source(name))
    if _built(name):
        assert _file_of(name, pure=False).endswith(".so")


def test_the_status_line_of_the_modules_built_from_their_source(monkeypatch):
    monkeypatch.delenv(compiled.ENV, raising=False)
    monkeypatch.setattr(compiled, "_whole_loaded", dict.fromkeys(compiled.WHOLE, True))
    assert compiled.whole_status() == (
        logging.DEBUG,
        f"{len(compiled.WHOLE)} modules of the hot path run built from their source",
    )
    stale = compiled.WHOLE[0]
    monkeypatch.setattr(compiled, "_whole_loaded", {**compiled._whole_loaded, stale: False})
    monkeypatch.setattr(compiled, "_whole_why_not", {stale: "built from another version"})
    level, line = compiled.whole_status()
    assert level == logging.WARNING
    assert line.startswith(f"1 of the {len(compiled.WHOLE)} modules of the hot path")
    assert f"({stale}): built from another version" in line
    monkeypatch.setenv(compiled.ENV, "1")
    assert compiled.whole_status()[0] == logging.INFO


def test_setup_marks_each_module_with_its_source_digest(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("es_broker_setup_marks", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    setup_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup_py)  # not __main__: defines, does not call setup()
    assert setup_py._whole() == compiled.WHOLE
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(setup_py, "MARKS", str(tmp_path))
    name = compiled.WHOLE[0]
    extension = setup_py._marked(name)
    assert extension.name == name
    source, mark = extension.sources
    assert source == name.replace(".", "/") + ".py"
    text = Path(mark).read_bytes()
    assert compiled.SOURCE_MARK + compiled.source_digest(_source(name)).encode() in text


def test_no_module_built_from_its_source_defines_a_coroutine_function():
    """A coroutine Cython builds has no `cr_suspended`: trio reads it of a task's coroutine when
    a Lock passes to a waiting task, so a built coroutine that is a task's own fails there."""
    for name in compiled.WHOLE:
        tree = ast.parse(_source(name).read_text())
        defined = [n.name for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef)]
        assert defined == [], f"{name} defines coroutine functions: {defined}"
