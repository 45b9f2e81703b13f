"""Priority rules: defaults, ranges, who may change them, user over project."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.domain.priority import PriorityRefused, PriorityRules, choose, effective


def test_user_overrides_project_field_by_field() -> None:
    project = {"default": 5, "min": 0, "max": 20}
    assert effective(project, None) == PriorityRules(5, True, 0, 20)
    assert effective(project, {"max": 50, "may_change": False}) == PriorityRules(5, False, 0, 50)
    assert effective(None, None) == PriorityRules()


def test_choose() -> None:
    rules = PriorityRules(default=5, min=1, max=20)
    assert choose(rules, None) == 5
    assert choose(rules, 20) == 20
    with pytest.raises(PriorityRefused) as out:
        choose(rules, 21)
    assert not out.value.forbidden and "1..20" in str(out.value)
    fixed = PriorityRules(default=5, may_change=False)
    assert choose(fixed, 5) == 5  # asking for the default is no change
    with pytest.raises(PriorityRefused) as out:
        choose(fixed, 6)
    assert out.value.forbidden
    assert choose(fixed, 99, is_admin=True) == 99


@given(st.integers(0, 100), st.integers(0, 100), st.integers(0, 100), st.booleans(), st.integers(0, 100))
def test_an_accepted_priority_is_the_default_or_within_the_allowed_range(
    default: int, low: int, high: int, may: bool, asked: int
) -> None:
    rules = PriorityRules(default, may, min(low, high), max(low, high))
    try:
        got = choose(rules, asked)
    except PriorityRefused:
        assert asked != default and (not may or not rules.min <= asked <= rules.max)
    else:
        assert got == asked and (asked == default or (may and rules.min <= asked <= rules.max))
