"""Builds the compiled hot path (es_broker/remoting/_speedups.pyx and _codec.pyx,
es_broker/projections/_speedups.pyx, es_broker/commands/_speedups.pyx,
es_broker/log/_speedups.pyx) at install time.

The compiled modules are optional, as msgpack's, PyYAML's and aiohttp's are: when one
cannot be built (no C compiler, no Python headers, a compile error) the install goes on
without it, says so in a warning, and the package runs the pure-Python reference of that
module (es_broker/compiled.py; `es-broker serve` names which path runs in its first line).
ES_BROKER_PURE_PYTHON=1 at install builds none of them.

Everything else about the package is in pyproject.toml.
"""

from __future__ import annotations

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
    return cythonize(
        [Extension(name, [source]) for name, source in SOURCES.items()],
        compiler_directives={"language_level": "3"},
    )


if __name__ == "__main__":
    setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
