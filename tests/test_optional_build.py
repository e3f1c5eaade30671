"""An install without a C compiler (B-390): setup.py leaves each compiled module out, with a warning.

setup.py's build_ext (OptionalBuildExt) is run here on a one-file C extension in a temporary
build directory with CC set to /bin/false, as msgpack's and PyYAML's fallbacks are tested:
the build goes on, says which module it left out and why, and lists no output for it. The
start line of `es-broker serve` that names the implementation that runs is checked on a
broker process.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import sys
from pathlib import Path

import pytest
import setuptools
from setuptools import Distribution, Extension

from es_broker import compiled
from tests.process_fixtures import ROOT, serve


def _setup_module():
    # setuptools (71 and newer) finds its vendored packages (more_itertools, ...) through a folder
    # it appends to sys.path when first imported; a test that restored sys.path since would leave
    # setup.py's build_ext import unable to find them
    vendored = Path(setuptools.__file__).parent / "_vendor"
    if vendored.is_dir() and str(vendored) not in sys.path:
        sys.path.append(str(vendored))
    spec = importlib.util.spec_from_file_location("es_broker_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not __main__: defines, does not call setup()
    return module


def _build(tmp_path: Path, monkeypatch, compiler: str):
    setup_py = _setup_module()
    (tmp_path / "tiny.c").write_text("int tiny(void) { return 1; }\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CC", compiler)
    monkeypatch.setenv("LDSHARED", f"{compiler} -shared")
    dist = Distribution({"name": "tiny", "ext_modules": [Extension("tiny", ["tiny.c"])]})
    cmd = setup_py.OptionalBuildExt(dist)
    cmd.build_lib = str(tmp_path / "lib")
    cmd.build_temp = str(tmp_path / "temp")
    cmd.ensure_finalized()
    cmd.run()
    return cmd


def test_a_failing_compiler_leaves_the_extension_out_with_a_warning(tmp_path, monkeypatch, capfd):
    cmd = _build(tmp_path, monkeypatch, "/bin/false")
    assert cmd.skipped == ["tiny"]
    assert cmd.get_outputs() == []
    assert not list((tmp_path / "lib").glob("tiny*"))
    err = capfd.readouterr().err
    assert "es-broker's compiled hot path tiny could not be built (CompileError" in err
    assert "the pure-Python reference runs instead" in err


def test_a_working_compiler_builds_the_extension(tmp_path, monkeypatch, capfd):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler on this machine")
    cmd = _build(tmp_path, monkeypatch, cc)
    assert cmd.skipped == []
    (output,) = cmd.get_outputs()
    assert Path(output).is_file()
    assert "could not be built" not in capfd.readouterr().err


def test_setup_lists_every_compiled_module_the_package_loads():
    assert sorted(_setup_module().SOURCES) == sorted(compiled.MODULES)


def test_the_status_line_names_the_path_and_the_reason(monkeypatch):
    monkeypatch.delenv(compiled.ENV, raising=False)
    monkeypatch.setattr(compiled, "_loaded", dict.fromkeys(compiled.MODULES, True))
    level, line = compiled.status()
    if all(compiled._loaded.values()):  # the suite runs on a built tree
        assert level == logging.DEBUG and line.startswith("hot path: compiled")
    missing = compiled.MODULES[0]
    monkeypatch.setattr(compiled, "_loaded", {**compiled._loaded, missing: False})
    monkeypatch.setattr(compiled, "_why_not", {missing: "not built"})
    monkeypatch.setattr(compiled, "load", lambda name: None)
    level, line = compiled.status()
    assert level == logging.WARNING
    assert line.startswith(f"hot path: the pure-Python reference for {missing}: not built")
    monkeypatch.setenv(compiled.ENV, "1")
    assert compiled.status() == (
        logging.INFO,
        f"hot path: the pure-Python reference ({compiled.ENV}=1)",
    )


def test_serve_says_first_which_path_runs(tmp_path):
    log_file = tmp_path / "serve.log"
    with serve(tmp_path / "data", "-v", log_file=log_file, env={compiled.ENV: "1"}):
        pass
    logged = [line for line in log_file.read_text().splitlines() if line[:4].isdigit()]
    assert logged[0].endswith(
        f" INFO es_broker: hot path: the pure-Python reference ({compiled.ENV}=1)"
    )
