"""GPU indexes: the lowest free ones, never one in use, never more than the agent has."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from corral.domain.devices import assign_devices


def test_lowest_free_first() -> None:
    assert assign_devices(4, {0, 2}, 2) == (1, 3)
    assert assign_devices(4, set(), 0) == ()
    assert assign_devices(2, {1}, 2) is None


@given(st.integers(0, 16), st.sets(st.integers(0, 16)), st.integers(0, 16))
def test_never_taken_never_out_of_range(count: int, taken: set[int], want: int) -> None:
    got = assign_devices(count, taken, want)
    free = [i for i in range(count) if i not in taken]
    if got is None:
        assert len(free) < want
    else:
        assert len(got) == want and not set(got) & taken and all(0 <= i < count for i in got)
