"""How a ``tidemark`` command ends: its exit code, the same for every command (listed in tidemark_cli.main's
docstring, README and docs/OPERATIONS.md), and what an unexpected error prints instead of a traceback."""

from __future__ import annotations

import datetime as dt
import os
import sys
import tempfile
import traceback
from pathlib import Path

EXIT_OK, EXIT_JOB_FAILED, EXIT_REFUSED, EXIT_PARTIAL, EXIT_DAMAGE = 0, 1, 2, 3, 4
EXIT_UNEXPECTED = 70
"""An error Tidemark does not know (a bug, or a failure no message of its own describes yet); sysexits.h
calls 70 ``EX_SOFTWARE``. Kept apart from 1, which says the ingest job failed, and from 2, a refusal."""

DEBUG_VARIABLE = "TIDEMARK_DEBUG"
"""``TIDEMARK_DEBUG=1`` does what ``--debug`` does: an unexpected error prints its whole trace."""


def is_debug(flag: bool) -> bool:
    """Whether ``--debug`` was given or ``TIDEMARK_DEBUG`` is set to a true value."""
    return flag or os.environ.get(DEBUG_VARIABLE, "").strip().lower() in ("1", "true", "yes", "on")


def report_unexpected(exc: BaseException, debug: bool) -> int:
    """Tell the user about an error that is not a ``TidemarkError``: with ``debug``, its trace; otherwise one
    line that names it and the file that holds its trace. Returns ``EXIT_UNEXPECTED``."""
    trace = "".join(traceback.format_exception(exc))
    what = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}" if str(exc).strip() \
        else type(exc).__name__
    if debug:
        print(trace, end="", file=sys.stderr)
        print(f"tidemark: unexpected error: {what} (exit {EXIT_UNEXPECTED}; the trace is above)", file=sys.stderr)
        return EXIT_UNEXPECTED
    saved = save_trace(trace)
    where = f"the full trace is in {saved}" if saved else "the trace could not be saved"
    print(f"tidemark: unexpected error: {what}; {where} (--debug or {DEBUG_VARIABLE}=1 prints it)", file=sys.stderr)
    return EXIT_UNEXPECTED


def save_trace(trace: str) -> Path | None:
    """Write ``trace`` to a new file in the temporary folder (``TMPDIR``); its path, or None if it cannot."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    try:
        handle, name = tempfile.mkstemp(prefix=f"tidemark-error-{stamp}-", suffix=".txt")
        with os.fdopen(handle, "w") as file:
            file.write(trace)
    except OSError:
        return None
    return Path(name)
