"""Webhooks as rules (domain/webhooks.py): what a target may be, which addresses are private, and
when a failing delivery is tried again or given up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.domain.events import Position
from corral.domain.webhooks import (
    BACKOFF,
    GIVE_UP,
    JITTER,
    MAX_URL,
    BadTarget,
    delay,
    given_up,
    message_id_of,
    private,
    target,
)


@pytest.mark.parametrize(
    ("url", "host", "port"),
    [
        ("https://hooks.example.com/corral", "hooks.example.com", 443),
        ("http://hooks.example.com:8080/x?y=1", "hooks.example.com", 8080),
        ("http://[2001:db8::1]/", "2001:db8::1", 80),
    ],
)
def test_an_http_url_is_a_target(url: str, host: str, port: int) -> None:
    t = target(url)
    assert (t.url, t.host, t.port) == (url, host, port)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://example.com/", "http"),
        ("file:///etc/passwd", "http"),
        ("example.com/hook", "http"),
        ("https://user:pw@example.com/", "credentials"),
        ("https://user@example.com/", "credentials"),
        ("https:///path", "host"),
        ("https://example.com:99999/", "URL"),
        ("https://example.com/a b", "spaces"),
        ("https://example.com/\x00", "control"),
        ("https://example.com/" + "a" * MAX_URL, "2048"),
    ],
)
def test_anything_else_is_refused_saying_why(url: str, why: str) -> None:
    with pytest.raises(BadTarget, match=why):
        target(url)


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "::1", "fe80::1%eth0",
     "fd00::1", "0.0.0.0", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "224.0.0.1", "100.64.0.1"],
)  # fmt: skip
def test_loopback_link_local_and_private_addresses_are_private(address: str) -> None:
    assert private(address)


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8"])
def test_global_addresses_are_not(address: str) -> None:
    assert not private(address)


def test_the_schedule_grows_then_repeats_its_last_step() -> None:
    bases = [delay(n, BACKOFF, 0.0) for n in range(1, 9)]
    assert bases == [5.0, 30.0, 120.0, 600.0, 3600.0, 3600.0, 3600.0, 3600.0]


@given(st.integers(min_value=1, max_value=1000), st.floats(min_value=-1.0, max_value=1.0))
def test_jitter_stays_within_ten_percent(attempts: int, spread: float) -> None:
    base = BACKOFF[min(attempts, len(BACKOFF)) - 1]
    assert base * (1 - JITTER) <= delay(attempts, BACKOFF, spread) <= base * (1 + JITTER)


def test_an_event_is_given_up_a_day_after_its_first_attempt() -> None:
    first = datetime(2026, 12, 1, tzinfo=UTC)
    assert not given_up(first, first + GIVE_UP - timedelta(seconds=1))
    assert given_up(first, first + GIVE_UP)
    assert given_up(first, first + timedelta(seconds=10), timedelta(seconds=10))


@given(st.integers(min_value=0, max_value=2**63 - 1), st.integers(min_value=0, max_value=2**63 - 1))
def test_an_events_webhook_id_names_its_position_alone(txid: int, event_id: int) -> None:
    p = Position(txid, event_id)
    assert message_id_of(p) == f"msg_{p}"
    assert Position.parse(message_id_of(p).removeprefix("msg_")) == p
