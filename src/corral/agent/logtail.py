"""Ships a kernel's stdout/stderr files to the manager in chunks, each once, in order."""

from __future__ import annotations

from pathlib import Path

CHUNK = 256 * 1024
Chunk = tuple[str, str, int, str]


class LogTail:
    """Offsets of what the manager has stored per stream; chunks are resent until committed."""

    def __init__(self, kernel_id: str, files: dict[str, Path]) -> None:
        self.kernel_id = kernel_id
        self.files = files
        self.stored = dict.fromkeys(files, 0)
        self._sizes: dict[tuple[str, int], int] = {}
        self.drained = False

    def pending(self, final: bool) -> list[Chunk]:
        """New chunks (kernel_id, stream, byte offset, text); unless final, only whole lines.

        `drained` tells whether, for a final read, nothing is left after these chunks.
        """
        out: list[Chunk] = []
        drained = True
        for stream, path in self.files.items():
            try:
                with path.open("rb") as f:
                    f.seek(self.stored[stream])
                    data = f.read(CHUNK + 1)
            except FileNotFoundError:
                continue
            if len(data) > CHUNK:
                data, drained = data[:CHUNK], False
            elif not final:
                cut = data.rfind(b"\n")
                data = data[: cut + 1] if cut >= 0 else b""
            if data:
                self._sizes[(stream, self.stored[stream])] = len(data)
                out.append((self.kernel_id, stream, self.stored[stream], data.decode("utf-8", "replace")))
        self.drained = final and drained
        return out

    def commit(self, chunks: list[Chunk]) -> None:
        for _, stream, offset, _ in chunks:
            size = self._sizes.pop((stream, offset), 0)
            self.stored[stream] = max(self.stored[stream], offset + size)
