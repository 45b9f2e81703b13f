"""Corral's worker helper: record the error that ends a worker, for the root-cause report.

Stdlib only, importable by any kernel's plain `python3` (the agent puts this directory on
PYTHONPATH).  Use it as a decorator or a context manager:

    from corral_worker import record, RecoverableError

    @record
    def main() -> None:
        ...
        raise RecoverableError("the data server was briefly down")   # a retry can help

    with record():
        train()

On an exception it writes one `corral.error/v1` record to `$CORRAL_ERROR_FILE` (a nanosecond
timestamp, the worker's name and rank, the exception's type, message and traceback, and whether it
is recoverable) and re-raises it, so the process still fails as it would have.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any, Literal

__all__ = ["RecoverableError", "record", "write_record"]

SCHEMA = "corral.error/v1"
MESSAGE_MAX = 4096
TRACEBACK_MAX = 16 * 1024
FILE_BUDGET = 60 * 1024  # under the agent's 64 KiB cap


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # an exception whose __str__ fails still gets a record
        return f"<{type(exc).__name__}: its message could not be read>"


class RecoverableError(Exception):
    """Raise (or subclass) this for a failure a retry can fix: the record says `recoverable: true`."""


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _rank() -> int | None:
    value = os.environ.get("CORRAL_CLUSTER_RANK", os.environ.get("RANK", ""))
    return int(value) if value.isdigit() else None


def write_record(exc: BaseException, path: str | None = None) -> str | None:
    """Write `exc`'s record to `path` (default `$CORRAL_ERROR_FILE`); returns the path, or None when
    there is nowhere to write.  The file is replaced atomically: a reader never sees half of it."""
    target = path or os.environ.get("CORRAL_ERROR_FILE")
    if not target:
        return None
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-TRACEBACK_MAX:]
    body = {
        "schema": SCHEMA,
        "worker": {
            "name": os.environ.get("CORRAL_WORKER_NAME", ""),
            "rank": _rank(),
            "kernel_id": os.environ.get("CORRAL_KERNEL_ID", ""),
        },
        "timestamp_ns": time.time_ns(),
        "kind": "exception",
        "type": _type_name(exc),
        "message": _text(exc)[:MESSAGE_MAX],
        "traceback": trace,
        "recoverable": isinstance(exc, RecoverableError),
        "exit_code": None,
        "signal": None,
    }
    folder = os.path.dirname(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".corral-error-")
    try:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8", "backslashreplace")
        while len(data) > FILE_BUDGET and trace:
            # The agent reads at most 64 KiB: shorten the traceback (its start) until it fits.
            trace = trace[len(trace) // 2 :] if len(trace) > 1 else ""
            body["traceback"] = trace
            data = json.dumps(body, ensure_ascii=False).encode("utf-8", "backslashreplace")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return target


class record:
    """Decorator (`@record`, `@record()`) or context manager (`with record():`)."""

    def __init__(self, fn: Callable[..., Any] | None = None) -> None:
        self._fn = fn
        if fn is not None:
            functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._fn is None:  # @record() -- the function comes now
            return record(args[0])
        with record():
            return self._fn(*args, **kwargs)

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        return self if obj is None else functools.partial(self.__call__, obj)

    def __enter__(self) -> record:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> Literal[False]:
        # Only errors: a clean exit (SystemExit(0)) or Ctrl-C is not the worker's failure to report.
        if exc is not None and isinstance(exc, Exception) and not getattr(exc, "_corral_recorded", False):
            try:
                write_record(exc)
                exc._corral_recorded = True  # type: ignore[attr-defined]  # nested record(): the innermost wrote it
            except Exception:
                pass  # the worker's own error matters more than its record
        return False
