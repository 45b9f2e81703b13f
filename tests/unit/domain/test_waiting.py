"""Why a pending session waits (domain/waiting.py): infeasible apart from merely waiting, and the
reason a person reads, over the cases a queue meets."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from corral.domain.records import AgentRecord
from corral.domain.resources import ResourceSlots
from corral.domain.status import AgentStatus
from corral.domain.waiting import explain
from tests.support.records import agent_record, session_record

NOW = datetime(2026, 12, 4, 12, tzinfo=UTC)


def _agent(name: str, cpu: int, used: int = 0, status: AgentStatus = AgentStatus.ALIVE) -> AgentRecord:
    return agent_record(name, cpu=cpu, used_cpu=used, status=status)


def test_a_kernel_bigger_than_every_agent_is_infeasible() -> None:
    w = explain(session_record(cpu=8), 1, [_agent("a", 4), _agent("b", 4)], NOW)
    assert w.infeasible and "big enough for one kernel" in w.reason


def test_a_gang_bigger_than_the_whole_group_is_infeasible() -> None:
    w = explain(session_record(cpu=4, size=3), 1, [_agent("a", 4), _agent("b", 4)], NOW)
    assert w.infeasible and "3 kernels" in w.reason


def test_a_group_with_no_live_agent_waits_for_agents_and_is_not_infeasible() -> None:
    lost = [_agent("a", 4, status=AgentStatus.LOST)]
    for agents in ([], lost):
        w = explain(session_record(cpu=2), 1, agents, NOW)
        assert not w.infeasible and "no live agent" in w.reason and w.largest_free is None


def test_busy_agents_make_it_wait_not_infeasible() -> None:
    w = explain(session_record(cpu=4), 1, [_agent("a", 4, used=4), _agent("b", 4, used=3)], NOW)
    assert not w.infeasible and "waiting for room" in w.reason
    assert w.largest_free is not None and w.largest_free["cpu"] == 1


def test_the_reason_names_the_queue_a_retry_delay_or_a_hold() -> None:
    s = session_record(cpu=1)
    agents = [_agent("a", 4)]
    assert "3 ahead" in explain(s, 4, agents, NOW).reason
    later = replace(s, retry_after=NOW + timedelta(seconds=30))
    assert "not before 30 s" in explain(later, 1, agents, NOW).reason
    assert "held: x" in explain(s, 1, agents, NOW, hold="x").reason
    assert "as soon as the scheduler runs" in explain(s, 1, agents, NOW).reason
    assert explain(s, 1, agents, NOW).needs == ResourceSlots.parse({"cpu": 1})
