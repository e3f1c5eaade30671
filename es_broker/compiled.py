"""Which implementation of the hot path runs: the compiled one or the pure-Python reference.

The hot path of the wire codec (stored-message encoding and decoding, batch
bodies, properties, tag hashes) has a compiled twin, built from a Cython
module by `pip install .`. The pure-Python functions stay the reference: the
compiled ones return byte-identical results and raise the same errors (they
hand anything unusual back to the reference), so a log written by either is
read the same by the other.

ES_BROKER_PURE_PYTHON=1 forces the reference everywhere, for the second CI
pass and for comparing the two. Without it, a missing compiled module (a
source tree that was never built, or an install on a machine without a C
compiler: setup.py then installs without it) falls back to the reference;
`es-broker serve` says so in its first log line (status()), a warning.
"""

from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType
from typing import Any

ENV = "ES_BROKER_PURE_PYTHON"

log = logging.getLogger(__name__)

# the compiled twins setup.py builds, each with the modules whose reference it replaces
MODULES = (
    "es_broker.commands._speedups",
    "es_broker.log._speedups",
    "es_broker.projections._speedups",
    "es_broker.remoting._codec",
    "es_broker.remoting._speedups",
)

_loaded: dict[str, bool] = {}
_why_not: dict[str, str] = {}


def pure_python_forced() -> bool:
    return os.environ.get(ENV, "") not in ("", "0")


def load(name: str) -> ModuleType | None:
    """The compiled module `name`, or None when the reference runs (forced, or not built)."""
    if pure_python_forced():
        _loaded.setdefault(name, False)
        return None
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        # one line for all of them at the start of `serve` (status()); here for the curious
        log.debug("the compiled hot path %s is not built (%s)", name, exc)
        _loaded.setdefault(name, False)
        built = isinstance(exc, ModuleNotFoundError) and exc.name == name
        _why_not.setdefault(name, "not built" if built else f"not loadable: {exc}")
        return None
    _loaded.setdefault(name, True)
    return module


def install(
    namespace: dict[str, Any], name: str, *functions: str, **renamed: str
) -> ModuleType | None:
    """Put the compiled twins of `functions` in `namespace`, a module's globals(), in place of
    its pure-Python reference of the same name; `renamed` maps a reference's name to its twin's
    when they differ. The compiled module `name`, or None when the reference stays.

    The one seam through which a compiled twin takes a reference's place: the module keeps its
    typed reference (mypy reads that) and its REFERENCE table, and whatever the module calls by
    these names, or imports from it afterwards, gets the twin."""
    module = load(name)
    if module is not None:
        for function in functions:
            namespace[function] = getattr(module, function)
        for function, twin in renamed.items():
            namespace[function] = getattr(module, twin)
    return module


def active() -> dict[str, bool]:
    """Per compiled module, as first asked for: True if it runs, False if the reference does."""
    return dict(_loaded)


def status() -> tuple[int, str]:
    """The log level and the one line saying which hot path runs and why (DEBUG when compiled)."""
    for name in MODULES:
        load(name)
    if pure_python_forced():
        return logging.INFO, f"hot path: the pure-Python reference ({ENV}=1)"
    missing = [name for name in MODULES if not _loaded.get(name)]
    if not missing:
        return logging.DEBUG, f"hot path: compiled ({', '.join(MODULES)})"
    reasons = "; ".join(sorted({_why_not.get(name, "not built") for name in missing}))
    return logging.WARNING, (
        f"hot path: the pure-Python reference for {', '.join(missing)}: {reasons} "
        "(same results, slower); reinstall where a C compiler and the Python headers are "
        "(`pip install .`) to build it"
    )
