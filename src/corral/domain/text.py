"""Cutting bytes without splitting a UTF-8 character (log pieces are shown as text)."""

from __future__ import annotations


def utf8_cut(data: bytes) -> int:
    """Length of the longest prefix of `data` that does not end inside a UTF-8 sequence."""
    end = len(data)
    for back in range(1, min(4, end) + 1):
        byte = data[end - back]
        if byte < 0x80:
            return end
        if byte >= 0xC0:  # a lead byte: is its sequence complete?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return end if back >= need else end - back
    return end


def split_utf8(data: bytes, size: int) -> list[bytes]:
    """Pieces of at most `size` bytes (size >= 4), cut between characters where the text allows."""
    out: list[bytes] = []
    while data:
        head = data[:size]
        cut = utf8_cut(head) if len(data) > size else len(head)
        out.append(head[: cut or len(head)])
        data = data[cut or len(head) :]
    return out
