"""Where a gang meets: which orders may start at once, and rank 0's port from an agent's range."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.domain.rendezvous import may_run, overlap, parse_port_range, pick_port, port_range, start_at_once
from corral.domain.status import KernelStatus


@pytest.mark.parametrize(
    ("agents", "port", "expected"),
    [
        (["a"], None, True),  # one kernel: no one to meet
        (["a", "a", "a"], None, True),  # a gang on one agent: that agent picks the port
        (["a", "b"], None, False),  # spread, port unknown: wait for the start order
        (["a", "b"], 29400, True),  # spread, port chosen at placement (or reported)
        (["a", None], None, False),
    ],
)
def test_start_at_once_only_when_the_rendezvous_is_known(
    agents: list[str | None], port: int | None, expected: bool
) -> None:
    assert start_at_once(agents, port) is expected


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        ({"rendezvous_ports": [29400, 29499]}, (29400, 29499)),
        ({"rendezvous_ports": [80, 80]}, (80, 80)),
        ({}, None),
        (None, None),
        ("text", None),
        ({"rendezvous_ports": [29499, 29400]}, None),  # high first
        ({"rendezvous_ports": [0, 10]}, None),
        ({"rendezvous_ports": [1, 65536]}, None),
        ({"rendezvous_ports": [True, 10]}, None),
        ({"rendezvous_ports": ["1", "10"]}, None),
        ({"rendezvous_ports": [1, 2, 3]}, None),
        ({"rendezvous_ports": 29400}, None),
        ({"rendezvous_ports": [1.5, 10]}, None),
    ],
)
def test_an_agents_declared_range_is_used_only_when_it_is_one(info: object, expected: object) -> None:
    assert port_range(info) == expected


def test_parse_port_range_names_what_is_wrong() -> None:
    assert parse_port_range("29400-29499") == (29400, 29499)
    assert parse_port_range("8080") == (8080, 8080)
    for bad in ("", "a-b", "29499-29400", "0-10", "1-70000", "1-2-3", "-5"):
        with pytest.raises(ValueError, match="port range"):
            parse_port_range(bad)


@given(
    st.integers(1, 65535).flatmap(
        lambda low: st.tuples(st.just(low), st.integers(low, min(65535, low + 40)))
    ),
    st.sets(st.integers(1, 65535)),
    st.text(max_size=20),
)
def test_a_picked_port_is_in_range_and_never_held(ports: tuple[int, int], held: set[int], key: str) -> None:
    low, high = ports
    got = pick_port(ports, held, key)
    free = set(range(low, high + 1)) - held
    if got is None:
        assert not free
    else:
        assert got in free
    assert pick_port(ports, held, key) == got  # the same key, the same port


def test_different_sessions_usually_start_at_different_ports() -> None:
    picked = {pick_port((29400, 29499), set(), f"session-{i}") for i in range(50)}
    assert len(picked) > 25  # a port taken outside Corral does not fail every retry the same way


@given(
    st.tuples(st.integers(1, 100), st.integers(1, 100)), st.tuples(st.integers(1, 100), st.integers(1, 100))
)
def test_ranges_overlap_when_they_share_a_port(a: tuple[int, int], b: tuple[int, int]) -> None:
    a, b = (min(a), max(a)), (min(b), max(b))
    shared = set(range(a[0], a[1] + 1)) & set(range(b[0], b[1] + 1))
    assert overlap(a, b) is bool(shared)


P, R, C, T = KernelStatus.PREPARING, KernelStatus.RUNNING, KernelStatus.CREATING, KernelStatus.TERMINATING
D, S = KernelStatus.PREPARED, KernelStatus.SCHEDULED


@pytest.mark.parametrize(
    ("kernels", "port", "alive", "expected"),
    [
        ([(R, "a")], None, {"a"}, True),  # started
        ([(T, "a"), (D, "b")], None, {"a", "b"}, True),
        ([(C, "a"), (D, "b")], None, {"a", "b"}, True),  # told to start
        ([(P, "a")], None, {"a"}, False),  # handed to a live agent: it will report (or be killed)
        ([(P, "a")], None, set(), True),  # one kernel, prepare and start, its agent silent: may run
        ([(D, "a"), (D, "a")], None, set(), True),  # a gang on one agent: the same
        ([(P, "a"), (D, "b")], None, {"a"}, False),  # spread, waiting for the start order: cannot run
        ([(P, "a"), (D, "b")], 29400, {"a"}, True),  # spread with a known port: rank 1 may run on b
        ([(S, "a")], None, set(), False),  # placed, never handed over
    ],
)
def test_a_session_may_run_when_a_process_of_it_may_exist(
    kernels: list[tuple[KernelStatus, str]], port: int | None, alive: set[str], expected: bool
) -> None:
    assert may_run(kernels, port, alive) is expected
