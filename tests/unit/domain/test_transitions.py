"""Every (status, status) pair is either allowed or refused, exactly as DESIGN §3 lists."""

from __future__ import annotations

import itertools

import pytest

from corral.domain.status import KernelStatus as K
from corral.domain.status import SessionStatus as S
from corral.domain.transitions import (
    kernel_chain,
    kernel_move_allowed,
    kernel_sources,
    session_move_allowed,
    session_sources,
)

STARTUP = [S.SCHEDULED, S.PREPARING, S.PULLING, S.PREPARED, S.CREATING]
NON_TERMINAL = [s for s in S if s not in (S.TERMINATED, S.CANCELLED, S.ERROR)]

# Written out again from the DESIGN table, independently of the implementation.
EXPECTED_SESSION = {
    (S.PENDING, S.SCHEDULED),
    (S.PENDING, S.CANCELLED),
    (S.SCHEDULED, S.PREPARING),
    (S.PREPARING, S.PREPARING),
    (S.PREPARING, S.PULLING),
    (S.SCHEDULED, S.PREPARED),
    (S.PREPARING, S.PREPARED),
    (S.PULLING, S.PREPARED),
    (S.PREPARED, S.CREATING),
    (S.CREATING, S.RUNNING),
    *((s, S.PENDING) for s in STARTUP),
    *((s, S.TERMINATING) for s in NON_TERMINAL if s is not S.TERMINATING),
    (S.TERMINATING, S.TERMINATED),
    (S.TERMINATING, S.ERROR),
    (S.TERMINATING, S.CANCELLED),  # our addition: cancelled after placement, before any start
    (S.RUNNING, S.SUSPENDED),
    (S.TERMINATING, S.SUSPENDED),
    (S.SUSPENDED, S.PENDING),
}


@pytest.mark.parametrize(("src", "dst"), list(itertools.product(S, S)), ids=lambda s: str(s))
def test_session_pair(src: S, dst: S) -> None:
    assert session_move_allowed(src, dst) is ((src, dst) in EXPECTED_SESSION)


def test_terminal_sessions_never_move() -> None:
    for src in (S.TERMINATED, S.CANCELLED, S.ERROR):
        assert not any(session_move_allowed(src, dst) for dst in S)


def test_there_is_no_retrying_status() -> None:
    assert "RETRYING" not in {s.value for s in S}


def test_sources_are_the_update_guard() -> None:
    for dst in S:
        assert session_sources(dst) == {a for a, b in EXPECTED_SESSION if b == dst}


KERNEL_STARTUP = [K.SCHEDULED, K.PREPARING, K.PULLING, K.PREPARED, K.CREATING]
KERNEL_LIVE = [k for k in K if k not in (K.TERMINATED, K.CANCELLED, K.ERROR)]
EXPECTED_KERNEL = {
    (K.PENDING, K.SCHEDULED),
    (K.SCHEDULED, K.PREPARING),
    (K.PREPARING, K.PULLING),
    (K.PREPARING, K.PREPARED),
    (K.PULLING, K.PREPARED),
    (K.PREPARED, K.CREATING),
    (K.CREATING, K.RUNNING),
    (K.SUSPENDED, K.PENDING),
    (K.CREATING, K.SUSPENDED),
    (K.RUNNING, K.SUSPENDED),
    (K.TERMINATING, K.SUSPENDED),
    *((k, K.PENDING) for k in KERNEL_STARTUP),
    *((k, K.TERMINATING) for k in KERNEL_LIVE if k is not K.TERMINATING),
    *((k, end) for k in KERNEL_LIVE for end in (K.TERMINATED, K.ERROR, K.CANCELLED)),
}


@pytest.mark.parametrize(("src", "dst"), list(itertools.product(K, K)), ids=lambda s: str(s))
def test_kernel_pair(src: K, dst: K) -> None:
    assert kernel_move_allowed(src, dst) is ((src, dst) in EXPECTED_KERNEL)


def test_kernel_sources_match() -> None:
    for dst in K:
        assert kernel_sources(dst) == {a for a, b in EXPECTED_KERNEL if b == dst}


@pytest.mark.parametrize("start", list(K), ids=str)
def test_a_kernel_chain_applies_each_status_from_where_the_last_applied_one_left_it(start: K) -> None:
    for chain in itertools.product(K, repeat=3):
        current, expected = start, []
        for status in chain:
            expected.append((current, status) in EXPECTED_KERNEL)
            current = status if expected[-1] else current
        assert kernel_chain(start, chain) == tuple(expected), chain


def test_a_refused_status_in_a_chain_leaves_the_kernel_where_it_was() -> None:
    steps = [K.PREPARING, K.RUNNING, K.PREPARED, K.CREATING, K.RUNNING, K.TERMINATED, K.ERROR]
    assert kernel_chain(K.SCHEDULED, steps) == (True, False, True, True, True, True, False)
