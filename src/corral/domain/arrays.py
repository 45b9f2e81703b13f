"""Job arrays: which indices an array spec names ("0-49", "1-1000:10", "1,3,8-9"), Slurm style."""

from __future__ import annotations

import re

MAX_ELEMENTS = 10_000
"""Elements one request may create (one transaction; a bigger batch is several requests)."""
MAX_INDEX = 1_000_000
"""Largest index: enough for any real sweep, small enough that a typo is not a billion rows."""

_PART = re.compile(r"^([0-9]{1,7})(?:-([0-9]{1,7})(?::([0-9]{1,7}))?)?$")


class ArrayError(ValueError):
    """The spec cannot be read, or names too many (or no) elements."""


def parse_indices(text: str) -> tuple[int, ...]:
    """The indices, ascending and without repeats; `ArrayError` says what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise ArrayError("an array is a list of indices or ranges, e.g. '0-49', '1-100:10', '1,3,5'")
    found: set[int] = set()
    for part in text.split(","):
        m = _PART.match(part.strip())
        if m is None:
            raise ArrayError(f"cannot read {part.strip()[:40]!r}: use N, N-M or N-M:STEP")
        start = int(m.group(1))
        end = int(m.group(2)) if m.group(2) is not None else start
        step = int(m.group(3)) if m.group(3) is not None else 1
        if end < start:
            raise ArrayError(f"{part.strip()!r}: the range ends before it starts")
        if step < 1:
            raise ArrayError(f"{part.strip()!r}: the step must be at least 1")
        if end > MAX_INDEX:
            raise ArrayError(f"indices go up to {MAX_INDEX}")
        if (end - start) // step + 1 + len(found) > MAX_ELEMENTS:
            raise ArrayError(f"at most {MAX_ELEMENTS} elements per request")
        found.update(range(start, end + 1, step))
    return tuple(sorted(found))


def describe(indices: tuple[int, ...]) -> str:
    """The shortest "a-b,c" form of sorted indices (steps are not rediscovered)."""
    parts: list[str] = []
    run_start = prev = None
    for i in indices:
        if prev is not None and i == prev + 1:
            prev = i
            continue
        if run_start is not None:
            parts.append(str(run_start) if run_start == prev else f"{run_start}-{prev}")
        run_start = prev = i
    if run_start is not None:
        parts.append(str(run_start) if run_start == prev else f"{run_start}-{prev}")
    return ",".join(parts)


def element_name(base: str, index: int) -> str:
    """NAME[INDEX], as Slurm shows an array task."""
    return f"{base}[{index}]"


ELEMENT_KEY_MARK = ":array:"
"""In an element's idempotency key; users' own keys may not hold it (like the retry mark)."""


def element_creation_id(creation_id: str, index: int) -> str:
    return f"{creation_id}{ELEMENT_KEY_MARK}{index}"
