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

Beside the twins, the busiest plain modules of the writer and of a request's path (`WHOLE`) are
compiled as they are: Cython builds each from its own .py, so the one source is both the
reference and what runs compiled, without the interpreter's loop. `install_finder` (run when
es_broker is imported) picks, for each, the built module only when it was built from the .py
beside it (setup.py marks each with its source's SHA-256): an edited source, or
ES_BROKER_PURE_PYTHON=1, runs the .py.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import mmap
import os
import sys
from collections.abc import Sequence
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

# the plain modules setup.py also builds from their own source, as they are (`install_finder`).
# None defines a coroutine function: a built coroutine lacks `cr_suspended`, which trio reads of
# a task's coroutine when it hands a Lock to a waiting task (tests/test_compiled_modules.py)
WHOLE = (
    "es_broker.commands.messages",
    "es_broker.commands.offsets",
    "es_broker.commands.placement",
    "es_broker.commands.pull",
    "es_broker.commands.runtime_stats",
    "es_broker.log.chunks",
    "es_broker.log.records",
    "es_broker.log.store",
    "es_broker.log.views",
    "es_broker.projections.audit",
    "es_broker.projections.commitlog",
    "es_broker.projections.consume_queue",
    "es_broker.projections.delivery_schedule",
    "es_broker.projections.key_index",
    "es_broker.projections.message_trace",
    "es_broker.projections.offset_rule",
    "es_broker.projections.offsets",
    "es_broker.projections.stats",
    "es_broker.projections.time_index",
    "es_broker.projections.timer",
    "es_broker.projections.topics",
    "es_broker.projections.transactions",
)

# what setup.py links into each of them: this, then the hex SHA-256 of the .py it was built from
SOURCE_MARK = b"es-broker-source-sha256:"

_loaded: dict[str, bool] = {}
_why_not: dict[str, str] = {}
_whole_loaded: dict[str, bool] = {}  # the same of `WHOLE`, as the finder found them
_whole_why_not: dict[str, str] = {}


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


def source_digest_of(text: bytes) -> str:
    """The digest setup.py marks a module built from the source `text` with."""
    return hashlib.sha256(text).hexdigest()


def source_digest(path: str | os.PathLike[str]) -> str:
    with open(path, "rb") as f:
        return source_digest_of(f.read())


def built_from(path: str | os.PathLike[str]) -> str | None:
    """The source digest setup.py marked a built module with; None for a module without one."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        at = data.find(SOURCE_MARK)
        if at < 0:
            return None
        start = at + len(SOURCE_MARK)
        return data[start : start + 64].decode("ascii", "replace")


def _which(name: str, built: str, source: str) -> str | None:
    """Why the .py `source` runs instead of the module `built` from it; None when the built runs."""
    if pure_python_forced():
        return f"{ENV}=1"
    if not os.path.exists(source):  # an install without the sources: the built one is all there is
        return None
    mark = built_from(built)
    if mark is None:
        return "built without its source's mark"
    if mark != source_digest(source):
        return "built from another version of its source (reinstall: `pip install -e .`)"
    return None


class _WholeModules(importlib.abc.MetaPathFinder):
    """Finds the modules of `WHOLE`: the built one when it is the .py's, else the .py."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _WHOLE_SET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
            _whole_loaded.setdefault(fullname, False)  # not built: the default finders' .py
            _whole_why_not.setdefault(fullname, "not built")
            return None
        built = str(spec.origin)
        source = os.path.join(os.path.dirname(built), fullname.rpartition(".")[2] + ".py")
        reason = _which(fullname, built, source)
        if reason is None:
            _whole_loaded[fullname] = True
            return spec
        _whole_loaded[fullname] = False
        _whole_why_not[fullname] = reason
        return importlib.util.spec_from_file_location(fullname, source)


_WHOLE_SET = frozenset(WHOLE)
_FINDER = _WholeModules()


def install_finder() -> None:
    """Put the finder of `WHOLE` first on sys.meta_path (once)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def active() -> dict[str, bool]:
    """Per compiled twin, as first asked for: True if it runs, False if the reference does."""
    return dict(_loaded)


def whole_active() -> dict[str, bool]:
    """Per module of `WHOLE` imported so far: True if its built module runs, False if its .py."""
    return dict(_whole_loaded)


def _not_running(
    names: tuple[str, ...], loaded: dict[str, bool], why_not: dict[str, str]
) -> tuple[list[str], str]:
    """Those of `names` whose compiled module does not run, and the reasons, for a status line."""
    missing = [name for name in names if not loaded.get(name)]
    return missing, "; ".join(sorted({why_not.get(name, "not built") for name in missing}))


def status() -> tuple[int, str]:
    """The log level and the one line saying which hot path runs and why (DEBUG when compiled)."""
    for name in MODULES:
        load(name)
    if pure_python_forced():
        return logging.INFO, f"hot path: the pure-Python reference ({ENV}=1)"
    missing, reasons = _not_running(MODULES, _loaded, _why_not)
    if not missing:
        return logging.DEBUG, f"hot path: compiled ({', '.join(MODULES)})"
    return logging.WARNING, (
        f"hot path: the pure-Python reference for {', '.join(missing)}: {reasons} "
        "(same results, slower); reinstall where a C compiler and the Python headers are "
        "(`pip install .`) to build it"
    )


def whole_status() -> tuple[int, str]:
    """The log level and the one line saying whether the modules of `WHOLE` run built or from
    their .py, and why (DEBUG when built)."""
    for name in WHOLE:
        importlib.import_module(name)
    if pure_python_forced():
        return logging.INFO, f"{len(WHOLE)} modules of the hot path run from their source ({ENV}=1)"
    missing, reasons = _not_running(WHOLE, _whole_loaded, _whole_why_not)
    if not missing:
        return logging.DEBUG, f"{len(WHOLE)} modules of the hot path run built from their source"
    return logging.WARNING, (
        f"{len(missing)} of the {len(WHOLE)} modules of the hot path built from their source run "
        f"from it instead ({', '.join(missing)}): {reasons} (same results, slower)"
    )
