"""Array specs: what indices they name, and what they refuse."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.domain.arrays import MAX_ELEMENTS, ArrayError, describe, parse_indices


@pytest.mark.parametrize(
    ("text", "indices"),
    [
        ("0-4", (0, 1, 2, 3, 4)),
        ("7", (7,)),
        ("1-10:3", (1, 4, 7, 10)),
        ("5,1,3-4", (1, 3, 4, 5)),
        ("2,2,1-2", (1, 2)),
        (" 1 - 2 ".replace(" ", ""), (1, 2)),
    ],
)
def test_indices_named(text: str, indices: tuple[int, ...]) -> None:
    assert parse_indices(text) == indices


@pytest.mark.parametrize(
    "text", ["", " ", "4-1", "a", "1-", "-1", "1-5:0", "1..5", "1;2", f"0-{MAX_ELEMENTS}"]
)
def test_refused(text: str) -> None:
    with pytest.raises(ArrayError):
        parse_indices(text)


@given(st.sets(st.integers(0, 5000), min_size=1, max_size=200))
def test_describe_reads_back_as_the_same_indices(found: set[int]) -> None:
    indices = tuple(sorted(found))
    assert parse_indices(describe(indices)) == indices


@given(st.text(max_size=40))
def test_any_text_is_indices_or_an_array_error(text: str) -> None:
    try:
        got = parse_indices(text)
    except ArrayError:
        return
    assert got == tuple(sorted(set(got))) and 0 < len(got) <= MAX_ELEMENTS
