"""Sessions read with their kernels in one statement: a row per kernel, the session's columns
first, the kernel's beside them (labelled k_<name>), then whatever else the statement reads.  Most
sessions have one kernel, and a gang's repeated session columns cost less than a second round trip
(on an idle cluster each cost about 1 ms of the 30 from a submit to its kernel's start)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from corral.store import convert
from corral.store.records import KernelRecord, SessionRecord
from corral.store.tables import kernels, sessions

COLUMNS = (*sessions.c, *(c.label(f"k_{c.name}") for c in kernels.c))
"""What such a statement selects first."""
_SESSION_KEYS = convert.names(tuple(c.name for c in sessions.c))
_KERNEL_KEYS = convert.names(tuple(c.name for c in kernels.c))
_SPLIT = len(_SESSION_KEYS)
END = _SPLIT + len(_KERNEL_KEYS)
"""The position of a statement's first column after COLUMNS."""


def records(rows: Iterable[Sequence[Any]]) -> dict[str, tuple[SessionRecord, Sequence[Any]]]:
    """Each session of `rows`, in their order, with its kernels in row order (none where an outer
    join found none), and its first row (for the columns after END)."""
    first: dict[str, Sequence[Any]] = {}
    found: dict[str, list[KernelRecord]] = defaultdict(list)
    for row in rows:
        sid = row[0]  # sessions.c.id
        first.setdefault(sid, row)
        k = dict(zip(_KERNEL_KEYS, row[_SPLIT:END], strict=True))
        if k["id"] is not None:
            found[sid].append(convert.kernel(k, owned=True))
    return {
        sid: (
            convert.session(
                dict(zip(_SESSION_KEYS, row[:_SPLIT], strict=True)), tuple(found[sid]), owned=True
            ),
            row,
        )
        for sid, row in first.items()
    }
