"""The store's JSON decoder (a fast path past json.loads' wrapping) reads every stored text exactly as
json.loads does, and fails on what it fails on."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.store.dialect.engine import json_loads

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(values)
def test_reads_what_json_dumps_wrote(value: object) -> None:
    text = json.dumps(value)
    assert json_loads(text) == json.loads(text)


@given(st.text(max_size=30))
def test_any_text_decodes_or_fails_as_json_loads_does(text: str) -> None:
    try:
        expected = json.loads(text)
    except json.JSONDecodeError as exc:
        with pytest.raises(json.JSONDecodeError) as got:
            json_loads(text)
        assert str(got.value) == str(exc)
        return
    assert repr(json_loads(text)) == repr(expected)  # repr: NaN is not equal to itself


@pytest.mark.parametrize("text", ["[1] x", " [1]", "{}\n", "null ", "nul", ""])
def test_edges(text: str) -> None:
    try:
        expected = json.loads(text)
    except json.JSONDecodeError:
        with pytest.raises(json.JSONDecodeError):
            json_loads(text)
        return
    assert json_loads(text) == expected
