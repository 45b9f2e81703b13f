"""Domain records for pure tests: a pending session and an agent, with only what a test varies."""

from __future__ import annotations

from datetime import UTC, datetime

from corral.domain.records import AgentRecord, SessionRecord
from corral.domain.resources import ResourceSlots
from corral.domain.spec import SessionSpec
from corral.domain.status import AgentStatus, SessionResult, SessionStatus

AT = datetime(2026, 12, 4, 11, tzinfo=UTC)


def session_record(cpu: int = 1, size: int = 1, sid: str = "s1") -> SessionRecord:
    spec = SessionSpec(command=("true",), resources=ResourceSlots.parse({"cpu": cpu}), cluster_size=size)
    return SessionRecord(
        id=sid, name=sid, spec=spec, status=SessionStatus.PENDING, status_changed_at=AT,
        result=SessionResult.UNDEFINED, cause=None, exit_code=None, root_rank=None, owner="u",
        parent_session_id=None, root_session_id=sid, retry_count=0, chain_submitted_at=AT,
        retry_after=None, phase_tries=0, reschedule_count=0, resume_count=0, attempt=1,
        manual_retry=False, total_retries=0, free_requeues=0, rule_counts={}, first_started_at=None,
        retry_cause=None, planned_attempts=None, avoid_agent=None, retry_state=None,
        retry_reason=None, next_attempt_id=None, reservation=None, termination_reason=None,
        termination_message=None, termination_requested_at=None, created_at=AT, started_at=None,
        terminated_at=None,
    )  # fmt: skip


def agent_record(
    name: str, cpu: int, used_cpu: int = 0, status: AgentStatus = AgentStatus.ALIVE
) -> AgentRecord:
    return AgentRecord(
        id=name, hostname=name, address="", resource_group="default", status=status, epoch=1,
        capacity=ResourceSlots.parse({"cpu": cpu}), info={}, last_heartbeat=AT, registered_at=AT,
        lost_at=None, used=ResourceSlots.parse({"cpu": used_cpu}),
    )  # fmt: skip
