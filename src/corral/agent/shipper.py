"""Ships each kernel's stdout/stderr files to the manager as raw bytes, each byte once, in order.

Shipping runs beside the kernel and after it: a session's end never waits for its output.  A
kernel's output is complete for the manager when the shipper sends `eof` after the kernel ended.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

from corral.domain.text import utf8_cut

PIECE = 16 << 20
"""Bytes per request: large enough for disk speed, small enough to bound memory."""
Stream = Literal["prepare", "stdout", "stderr"]
STREAMS: tuple[Stream, ...] = ("prepare", "stdout", "stderr")
"""`prepare`: its image's build output, written before it starts (so shipped first)."""


@dataclass(frozen=True)
class Piece:
    """What to send next: `data` at `offset` of `stream` (past a gap when the cap dropped bytes)."""

    stream: Stream
    offset: int
    data: bytes


def _open_log(path: Path) -> BinaryIO:
    """A kernel's log, never through a symlink or a FIFO: a kernel running as another account owns
    its directory and could put one there to have the agent ship (or block on) what it may not read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return os.fdopen(fd, "rb")


def _size(path: Path) -> int:
    """Bytes in a log file; 0 for one that is missing or was replaced by anything but a file."""
    try:
        info = path.lstat()
    except OSError:
        return 0
    return info.st_size if stat.S_ISREG(info.st_mode) else 0


class KernelLogs:
    """Offsets the manager has stored, per stream; `ended` once the kernel's processes are gone."""

    def __init__(self, kernel_id: str, generation: int, files: dict[Stream, Path], cap: int) -> None:
        self.kernel_id = kernel_id
        self.generation = generation
        self.files = files
        self.cap = cap
        self.offsets = dict.fromkeys(STREAMS, 0)
        self.ended = False
        self.closed = False
        """All of it was shipped before the kernel's end was reported (which says so)."""

    def next_piece(self) -> Piece | None:
        for stream in STREAMS:
            try:
                if _size(self.files[stream]) <= self.offsets[stream]:
                    continue  # nothing new: a stat is cheaper than an open
                with _open_log(self.files[stream]) as f:
                    size = os.fstat(f.fileno()).st_size
                    offset = self.offsets[stream]
                    if size - offset > self.cap:  # the manager would drop these: do not send them
                        offset = self.offsets[stream] = size - self.cap  # it counts the gap
                    f.seek(offset)
                    data = f.read(PIECE)
            except OSError:
                continue
            if not self.ended and len(data) < PIECE:
                # While it runs: whole lines when there are any, never half a character.
                line = data.rfind(b"\n")
                data = data[: line + 1] if line >= 0 else data[: utf8_cut(data)]
            elif not self.ended:
                data = data[: utf8_cut(data)]
            if data:
                return Piece(stream, offset, data)
        return None

    def end_piece(self) -> Piece:
        """The empty piece that says, once the kernel ended and all was sent, that this is all."""
        return Piece("stdout", self.offsets["stdout"], b"")

    def all_shipped(self) -> bool:
        """Nothing left to send (true at once for a kernel that printed nothing)."""
        for stream in STREAMS:
            if _size(self.files[stream]) != self.offsets[stream]:
                return False
        return True

    def commit(self, piece: Piece) -> None:
        self.offsets[piece.stream] = max(self.offsets[piece.stream], piece.offset + len(piece.data))
