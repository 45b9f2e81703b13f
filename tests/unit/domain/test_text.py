"""Cutting log bytes between characters: nothing lost, nothing split, sizes bounded."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from corral.domain.text import split_utf8, utf8_cut


@given(st.binary(max_size=64), st.integers(min_value=4, max_value=16))
def test_split_loses_nothing_and_bounds_sizes(data: bytes, size: int) -> None:
    pieces = split_utf8(data, size)
    assert b"".join(pieces) == data
    assert all(0 < len(p) <= size for p in pieces)


@given(st.text(max_size=40), st.integers(min_value=4, max_value=16))
def test_split_never_cuts_a_character(text: str, size: int) -> None:
    pieces = split_utf8(text.encode(), size)
    assert "".join(p.decode("utf-8") for p in pieces) == text


@given(st.text(min_size=1, max_size=20))
def test_cut_keeps_whole_characters_only(text: str) -> None:
    data = text.encode()
    for end in range(len(data) + 1):
        cut = utf8_cut(data[:end])
        data[:cut].decode("utf-8")  # never raises
        assert end - cut < 4


def test_known_cases() -> None:
    euro = "€".encode()  # three bytes
    assert utf8_cut(b"ab" + euro[:2]) == 2
    assert utf8_cut(b"ab" + euro) == 5
    assert utf8_cut(b"\x80\x80\x80\x80\x80") == 5  # not UTF-8 at all: nothing to protect
