"""Builds the compiled hot path (es_broker/remoting/_speedups.pyx and _codec.pyx,
es_broker/projections/_speedups.pyx, es_broker/commands/_speedups.pyx,
es_broker/log/_speedups.pyx) at install time, and the busiest plain modules from their own .py
(`WHOLE` in es_broker/compiled.py), each marked with its source's SHA-256 so that the package
runs it only while it is its .py's.

The compiled modules are optional, as msgpack's, PyYAML's and aiohttp's are: when one
cannot be built (no C compiler, no Python headers, a compile error) the install goes on
without it, says so in a warning, and the package runs the pure-Python reference of that
module (es_broker/compiled.py; `es-broker serve` names which path runs in its first line).
ES_BROKER_PURE_PYTHON=1 at install builds none of them.

Everything else about the package is in pyproject.toml.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, ExecError, PlatformError

SOURCES = {
    "es_broker.remoting._speedups": "es_broker/remoting/_speedups.pyx",
    "es_broker.remoting._codec": "es_broker/remoting/_codec.pyx",
    "es_broker.projections._speedups": "es_broker/projections/_speedups.pyx",
    "es_broker.commands._speedups": "es_broker/commands/_speedups.pyx",
    "es_broker.log._speedups": "es_broker/log/_speedups.pyx",
}

# where the source marks of the modules built from their own .py are written
MARKS = os.path.join("build", "es-broker-source-marks")

# Cython's reading of a plain module: annotations are not C types, so the built module does what
# its .py does (an `x: int` argument still takes what Python would pass it)
WHOLE_DIRECTIVES = {"language_level": "3", "annotation_typing": False, "binding": True}


def _whole() -> tuple[str, ...]:
    """es_broker.compiled.WHOLE, read without importing the package (it needs only the stdlib)."""
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(
        "es_broker_compiled_list", os.path.join(here, "es_broker", "compiled.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(module.WHOLE)


def _marked(name: str) -> Extension:
    """The extension of the plain module `name`: its .py, and a C file holding its SHA-256."""
    source = name.replace(".", "/") + ".py"
    with open(source, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()  # es_broker.compiled.source_digest
    os.makedirs(MARKS, exist_ok=True)
    mark = os.path.join(MARKS, name.replace(".", "_") + "_mark.c")
    symbol = "es_broker_source_mark_" + name.replace(".", "_")
    text = f'const char {symbol}[] = "es-broker-source-sha256:{digest}";\n'
    old = None
    if os.path.exists(mark):
        with open(mark) as f:
            old = f.read()
    if old != text:  # rewritten only when it changes, so an unchanged module is not rebuilt
        with open(mark, "w") as f:
            f.write(text)
    return Extension(name, [source, mark])


# what a failed build of one extension raises: no compiler, a compiler that fails, no headers
BUILD_ERRORS = (CCompilerError, ExecError, PlatformError, OSError, ValueError)

FALLBACK = (
    "WARNING: es-broker's compiled hot path %s could not be built (%s); "
    "installing without it: the pure-Python reference runs instead "
    "(same results, slower). Install a C compiler and the Python headers, then reinstall, "
    "to build it."
)


def _warn(message: str) -> None:
    # pip shows a build backend's output with -v (and always when the build fails)
    print(message, file=sys.stderr, flush=True)


class OptionalBuildExt(build_ext):
    """build_ext that leaves out, with a warning, each extension it cannot build."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:  # one compiler a core: some forty modules to build
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        self.skipped: list[str] = []
        try:
            super().run()
        except BUILD_ERRORS as exc:  # no usable compiler at all: raised before any extension
            self.skipped = [ext.name for ext in self.extensions]
            self.extensions = []
            _warn(FALLBACK % (", ".join(self.skipped), _reason(exc)))

    def build_extensions(self) -> None:
        super().build_extensions()
        # the outputs, an editable install's copies and the wheel's files: the built ones only
        self.extensions = [ext for ext in self.extensions if ext.name not in self.skipped]

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except BUILD_ERRORS as exc:
            self.skipped.append(ext.name)
            _warn(FALLBACK % (ext.name, _reason(exc)))


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if len(text) > 300:  # a failed compiler's whole command line
        text = text[:300] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def extensions() -> list[Extension]:
    """The Cython extensions, or none (with a warning) when Cython or the build is turned off."""
    if os.environ.get("ES_BROKER_PURE_PYTHON", "") not in ("", "0"):
        _warn("ES_BROKER_PURE_PYTHON is set: installing without the compiled hot path")
        return []
    try:
        from Cython.Build import cythonize
    except (
        ImportError
    ) as exc:  # a build without the declared build requirement (--no-build-isolation)
        _warn(FALLBACK % (", ".join(SOURCES), _reason(exc)))
        return []
    threads = os.cpu_count() or 1
    twins = cythonize(
        [Extension(name, [source]) for name, source in SOURCES.items()],
        compiler_directives={"language_level": "3"},
        nthreads=threads,
    )
    whole = cythonize(
        [_marked(name) for name in _whole()], compiler_directives=WHOLE_DIRECTIVES, nthreads=threads
    )
    return twins + whole


if __name__ == "__main__":
    setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
