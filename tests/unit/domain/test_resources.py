"""Resource slots: exact arithmetic and the units users write."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.domain.resources import ResourceError, ResourceSlots, parse_amount, parse_mem


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("64M", 64 * 2**20),
        ("2G", 2 * 2**30),
        ("512Ki", 512 * 1024),
        ("1.5Gi", 3 * 2**29),
        ("100", 100),
        (4096, 4096),
        ("1T", 2**40),
        ("64MiB", 64 * 2**20),
        ("10B", 10),
        ("3KB", 3 * 1024),
        ("2TiB", 2 * 2**40),
    ],
)
def test_mem_units_are_binary(text: str | int, expected: int) -> None:
    assert parse_mem(text) == expected


@pytest.mark.parametrize(
    "bad", ["", "M", "64X", "-1G", "1.5", "abc", True, "64m", "2g", "512ki", "1k", "10b", "1P", "1mb", "1Mb"]
)
def test_bad_mem_is_refused_with_the_field_and_the_forms(bad: object) -> None:
    with pytest.raises(ResourceError) as err:
        parse_amount("mem", bad)
    assert err.value.field == "mem"
    if isinstance(bad, str) and bad[:1].isdigit() and not bad.startswith("-") and "." not in bad:
        assert "Ki, Mi, Gi, Ti" in str(err.value), err.value


@pytest.mark.parametrize(
    ("name", "value"),
    [("cpu", -1), ("gpu", 0.5), ("gpu", -2), ("fpga", "x"), ("Bad Name", 1), ("cpu", "nan")],
)
def test_bad_amounts(name: str, value: object) -> None:
    with pytest.raises(ResourceError):
        parse_amount(name, value)


def test_cpu_millicores_and_exact_sums() -> None:
    a = ResourceSlots.parse({"cpu": "500m"})
    b = ResourceSlots.parse({"cpu": 0.1})
    total = a + b + b
    assert total["cpu"] == Decimal("0.7")  # no float drift
    assert (total - b - b - a)["cpu"] == 0


amounts = st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False, allow_infinity=False)
slots = st.dictionaries(st.sampled_from(["cpu", "mem", "gpu", "tpu"]), amounts).map(ResourceSlots)


@given(slots, slots)
def test_add_then_subtract_is_identity(a: ResourceSlots, b: ResourceSlots) -> None:
    assert ((a + b) - b).nonzero() == a.nonzero()


@given(slots, slots)
def test_fits_in_is_componentwise(need: ResourceSlots, free: ResourceSlots) -> None:
    assert need.fits_in(free) == all(need[k] <= free[k] for k in need if need[k] > 0)


@given(slots)
def test_json_round_trip_is_exact(a: ResourceSlots) -> None:
    assert ResourceSlots.from_json(a.to_json()) == a
