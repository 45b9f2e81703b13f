"""A kernel's files on the agent: its logs, its error file and its termination log, read safely
(the kernel controls them, and may run as another account)."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.agent.shipper import Stream
from corral.domain.error_record import FILE_MAX, FileRecord, parse_file

TERMINATION_LOG_MAX = 4096


@dataclass(frozen=True)
class KernelFiles:
    """Where one placement of a kernel writes, under its directory."""

    stdout: Path
    stderr: Path
    error: Path
    termination: Path
    prepare: Path
    """The output of its image's build, when it waited for one (the agent writes it)."""

    @classmethod
    def under(cls, directory: Path) -> KernelFiles:
        return cls(
            directory / "stdout.log",
            directory / "stderr.log",
            directory / "error.json",
            directory / "termination.log",
            directory / "prepare.log",
        )

    def streams(self) -> dict[Stream, Path]:
        """Its output, by stream name (what the log shipper reads)."""
        return {"prepare": self.prepare, "stdout": self.stdout, "stderr": self.stderr}


def read_kernel_file(path: Path, max_bytes: int, tail: bool = True) -> bytes:
    """A file the kernel controls, read safely: never a FIFO, device or symlink (which could block the
    agent or never end), and at most `max_bytes` (its end, or its start when `tail` is false)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return b""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return b""
        if tail:
            os.lseek(fd, max(0, info.st_size - max_bytes), os.SEEK_SET)
        return os.read(fd, max_bytes)
    except OSError:
        return b""
    finally:
        os.close(fd)


def tail_text(path: Path, max_bytes: int) -> str:
    return read_kernel_file(path, max_bytes).decode("utf-8", "replace")


def error_record(path: Path) -> dict[str, Any] | None:
    """The worker's error file, normalised (both formats, fields capped); {"note"} when it is unusable
    (too big, binary, not JSON, unknown format): the manager then synthesizes the record."""
    raw = read_kernel_file(path, FILE_MAX + 1, tail=False)
    if not raw:
        return None
    if len(raw) > FILE_MAX:
        return {"note": f"the error file is over {FILE_MAX // 1024} KiB: not read"}
    try:
        parsed = parse_file(json.loads(raw))
    except (ValueError, RecursionError):  # anything a kernel wrote: a bad record is no record
        return {"note": "the error file is not valid UTF-8 JSON"}
    return parsed.to_json() if isinstance(parsed, FileRecord) else {"note": parsed}
