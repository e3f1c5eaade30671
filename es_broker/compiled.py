"""Which implementation of the hot path runs: the compiled one or the pure-Python reference.

The hot path of the wire codec (stored-message encoding and decoding, batch
bodies, properties, tag hashes) has a compiled twin, built from a Cython
module by `pip install .`. The pure-Python functions stay the reference: the
compiled ones return byte-identical results and raise the same errors (they
hand anything unusual back to the reference), so a log written by either is
read the same by the other.

ES_BROKER_PURE_PYTHON=1 forces the reference everywhere, for the second CI
pass and for comparing the two. Without it, a missing compiled module (a
source tree that was never built) falls back to the reference with a warning.
"""

from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType

ENV = "ES_BROKER_PURE_PYTHON"

log = logging.getLogger(__name__)

_loaded: dict[str, bool] = {}


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
        log.warning(
            "the compiled hot path %s is not built (%s): running the pure-Python reference; "
            "`pip install .` builds it",
            name,
            exc,
        )
        _loaded.setdefault(name, False)
        return None
    _loaded.setdefault(name, True)
    return module


def active() -> dict[str, bool]:
    """Per compiled module, as first asked for: True if it runs, False if the reference does."""
    return dict(_loaded)
