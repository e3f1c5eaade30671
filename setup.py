"""Builds the compiled hot path (es_broker/remoting/_speedups.pyx and _codec.pyx,
es_broker/projections/_speedups.pyx, es_broker/commands/_speedups.pyx) at install time.

Everything else about the package is in pyproject.toml.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [
            Extension("es_broker.remoting._speedups", ["es_broker/remoting/_speedups.pyx"]),
            Extension("es_broker.remoting._codec", ["es_broker/remoting/_codec.pyx"]),
            Extension("es_broker.projections._speedups", ["es_broker/projections/_speedups.pyx"]),
            Extension("es_broker.commands._speedups", ["es_broker/commands/_speedups.pyx"]),
        ],
        compiler_directives={"language_level": "3"},
    ),
)
