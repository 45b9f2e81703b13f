"""Exit codes and signals, normalised: `-N` (Popen) and `128+N` (shells) both mean signal N."""

from __future__ import annotations

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
