"""How the commands end on errors that need no traceback."""

from __future__ import annotations

import os
import signal
import sys


def sole_error(error: BaseException) -> BaseException:
    """The one exception inside nested groups of one (trio's nurseries wrap what they raise)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def reader_gone() -> int:
    """The reader of stdout went away (`es-broker admin ... | head`): stop quietly, as Unix tools
    do, with no traceback and no second error when Python flushes stdout at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE
