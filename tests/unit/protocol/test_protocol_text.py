"""The agent protocol's bounded texts: too long is refused naming the field and its limit in
characters, and NUL or a lone surrogate is refused whatever the length."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from corral.protocol.messages import RegisterIn
from corral.protocol.orders import OrdersIn

REGISTER: dict[str, Any] = {"agent_id": "a", "hostname": "h", "address": "127.0.0.1", "capacity": {"cpu": 1}}
ORDERS: dict[str, Any] = {"agent_id": "a", "epoch": 1}

CASES = [
    (RegisterIn, REGISTER, "hostname", 256, lambda v: v),
    (RegisterIn, REGISTER, "address", 256, lambda v: v),
    (RegisterIn, REGISTER, "instance", 64, lambda v: v),
    (OrdersIn, ORDERS, "seen", 128, lambda v: v),
    (OrdersIn, ORDERS, "started", 256, lambda v: [v]),
]


@pytest.mark.parametrize(("model", "base", "field", "limit", "wrap"), CASES, ids=[c[2] for c in CASES])
def test_bounded_texts_say_how_many_characters(
    model: type[BaseModel], base: dict[str, Any], field: str, limit: int, wrap: Any
) -> None:
    model.model_validate({**base, field: wrap("x" * limit)})
    with pytest.raises(ValidationError) as too_long:
        model.model_validate({**base, field: wrap("x" * (limit + 1))})
    [error] = too_long.value.errors()
    assert error["loc"][0] == field
    assert f"at most {limit} characters" in error["msg"]
    for bad in ("a\x00b", "a\udc80b"):
        with pytest.raises(ValidationError) as refused:
            model.model_validate({**base, field: wrap(bad)})
        assert refused.value.errors()[0]["loc"][0] == field
