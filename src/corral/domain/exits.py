"""Exit codes and signals, normalised: `-N` (Popen) and `128+N` (shells) both mean signal N."""

from __future__ import annotations

import re
from dataclasses import dataclass

OOM_EXIT_CODE = 137


@dataclass(frozen=True)
class ExitInfo:
    """How a kernel's main process ended."""

    exit_code: int
    """0..255 as a shell would show it; a signal N shows as 128+N."""
    signal: int | None
    """The signal that ended it, if any."""


def normalise_exit(raw: int) -> ExitInfo:
    """From a Popen-style return code (negative for a signal) or a shell code (128+N)."""
    if raw < 0:
        return ExitInfo(128 + (-raw), -raw)
    if 128 < raw < 128 + 65:
        return ExitInfo(raw, raw - 128)
    return ExitInfo(raw & 0xFF, None)


# The words of Corral's spawn (its helper, its fallback, the supervisor) on stderr when it could not
# execute a kernel's command: "corral: cannot execute PATH: REASON" (126 or 127, as a shell).
_CANNOT = re.compile(r"^corral: cannot (?:execute|start) '?(.+?)'?: (.+)$")


def cannot_execute(tail: str, account: str) -> str | None:
    """'cannot execute PATH as ACCOUNT: reason' from the last line of a kernel's stderr, when it is
    the spawn's own word on why the command could not run (None otherwise)."""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    found = _CANNOT.match(lines[-1]) if lines else None
    if found is None:
        return None
    reason = found.group(2)
    return f"cannot execute {found.group(1)} as {account}: {reason[:1].lower()}{reason[1:]}"
