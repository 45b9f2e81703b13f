"""Event positions and the registry of event types (domain/events.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.domain.events import EVENT_TYPES, Position, matching, unknown_patterns

SRC = Path(__file__).resolve().parents[3] / "src" / "corral"
numbers = st.integers(min_value=0, max_value=2**63 - 1)


@given(numbers, numbers)
def test_a_position_reads_back_as_written(txid: int, event_id: int) -> None:
    p = Position(txid, event_id)
    assert Position.parse(str(p)) == p


@given(numbers, numbers, numbers, numbers)
def test_positions_order_by_transaction_then_id(t1: int, i1: int, t2: int, i2: int) -> None:
    assert (Position(t1, i1) < Position(t2, i2)) == ((t1, i1) < (t2, i2))


def test_a_sqlite_position_is_the_event_id_alone() -> None:
    assert str(Position(0, 42)) == "42" and Position.parse("42") == Position(0, 42)
    assert str(Position(812, 42)) == "812-42"


@pytest.mark.parametrize("text", ["", "-1", "1-", "a", "1.5", "1-2-3", "١٢", "9" * 30, "1 2", "0x10"])
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="position"):
        Position.parse(text)


def test_globs_name_known_types() -> None:
    assert matching("session.retry_*") == [
        "session.retry_scheduled",
        "session.retry_exhausted",
        "session.retry_succeeded",
    ]
    assert matching("*") == list(EVENT_TYPES)
    assert unknown_patterns(["session.created", "session.nope*", "deploy*", "depot*"]) == [
        "session.nope*",
        "depot*",
    ]


def test_every_type_the_code_writes_is_registered() -> None:
    """A type written anywhere in src (a quoted `entity.verb` literal) is in the registry, so the
    filters and webhooks can name it."""
    written = set()
    for path in SRC.rglob("*.py"):
        if (path.name == "events.py" and path.parent.name == "domain") or "web" in path.parts:
            continue  # the registry itself; the web UI's pages name templates (session.html)
        for line in path.read_text().splitlines():
            if "audit(" not in line:  # an audit row's action (webhook.create) is not an event
                written |= set(re.findall(r"\"((?:session|webhook|deployment|route)\.[a-z_]+)\"", line))
    assert written, "no event type found: the pattern is stale"
    assert sorted(written - set(EVENT_TYPES)) == []
