"""What a retry decision reads of a failed attempt: the policies that apply to it and the facts
of its failure (cause, exit code, conditions, message, log tail, categories)."""

from __future__ import annotations

from dataclasses import replace

import structlog

from corral.domain.cause import Cause
from corral.domain.cluster import ClusterSettings
from corral.domain.error_record import Source, error_record
from corral.domain.failure import attempt_conditions, categorise, kernel_facts, log_tail, termination_message
from corral.domain.policy import FailureFacts, NamedPolicy, PolicyError, policy_from
from corral.domain.records import SessionRecord
from corral.store import config, retries
from corral.store.unit import Tx

log = structlog.get_logger("corral.retry")


async def named_policies(
    conn: Tx, s: SessionRecord, settings: ClusterSettings
) -> tuple[list[NamedPolicy], list[str]]:
    """The project's policies first (always), then those the session named (additive), else the
    cluster's retry.default_policy; and the names that could not be applied (deleted, or
    unusable), which the decision then mentions."""
    project = await config.project_config(conn, s.spec.project) or {}
    names = list(dict.fromkeys([*(project.get("retry_policies") or []), *s.spec.retry_policies]))
    if not names and settings.default_policy:
        names = [settings.default_policy]
    if not names:
        return [], []
    stored = await config.policies(conn, names)
    found, missing = [], []
    for name in names:
        if name not in stored:
            missing.append(f"{name} (deleted)")
            continue
        try:
            found.append(policy_from(name, stored[name], settings.default_backoff))
        except PolicyError as exc:  # validated on apply: only a hand-edited row gets here
            log.error("retry policy unusable", policy=name, field=exc.field, error=str(exc))
            missing.append(f"{name} (unusable)")
    return found, missing


async def failure_facts(conn: Tx, s: SessionRecord, settings: ClusterSettings) -> FailureFacts:
    cause = s.cause or Cause.UNKNOWN
    root = next((k for k in s.kernels if k.rank == s.root_rank), None) if s.root_rank is not None else None
    tail = ""
    if root is not None:
        # The agent's own tail comes with the kernel's end; shipped output may still be on its way.
        given = root.detail.get("log_tail")
        tail = log_tail(given if isinstance(given, str) else await retries.log_tail(conn, root.id))
    record = error_record(root.outcome()) if root is not None else None
    written = record if record is not None and record.source is not Source.SYNTHESIZED else None
    log_file = s.termination_message
    if root is not None:
        from_tail = root.detail.get("termination_source") == "log_tail"
        log_file = None if from_tail else root.termination_message
    facts = FailureFacts(
        cause=str(cause),
        exit_code=s.exit_code if root else None,
        conditions=attempt_conditions(
            cause,
            root.outcome() if root else None,
            never_placed=all(k.agent_id is None for k in s.kernels),
        ),
        message=termination_message(log_file, written.message if written else None, tail),
        log_tail=tail,
        kernels=tuple(
            kernel_facts(cause, k.role, k.outcome(), k.termination_message, k.detail.get("log_tail"))
            for k in s.kernels
            if k.failed and not k.killed_by_corral
        ),
        recoverable=record.recoverable if record is not None else None,
        agent_id=root.agent_id if root else None,
    )
    return replace(facts, categories=categorise(settings.categories, facts))
