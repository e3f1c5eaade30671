"""Builds the compiled hot path (es_broker/remoting/_speedups.pyx) at install time.

Everything else about the package is in pyproject.toml.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [Extension("es_broker.remoting._speedups", ["es_broker/remoting/_speedups.pyx"])],
        compiler_directives={"language_level": "3"},
    ),
)
