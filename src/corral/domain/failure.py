"""What a failed attempt looks like to retry rules: conditions, message, categories (DESIGN §4)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from corral.domain.cause import Cause, KernelOutcome
from corral.domain.error_record import Source, error_record
from corral.domain.policy import (
    Condition,
    ExitCodes,
    FailureFacts,
    KernelFacts,
    PolicyError,
    bounded_search,
    common_fields,
    common_match,
    pattern_from,
)

LOG_TAIL_LINES = 80
LOG_TAIL_BYTES = 2048
MESSAGE_CHARS = 4096

# The conditions a cause implies for the attempt as a whole (each is set by one event).
_CAUSE_CONDITIONS = {
    Cause.OOM_KILLED: Condition.OOM_KILLED,
    Cause.AGENT_TRANSIENT: Condition.EVICTED,
    Cause.PREEMPTED: Condition.PREEMPTED,
    Cause.DEADLINE_EXCEEDED: Condition.DEADLINE_EXCEEDED,
    Cause.IMAGE_PULL_FAILURE: Condition.IMAGE_PULL_FAILURE,
}


def kernel_conditions(k: KernelOutcome) -> frozenset[Condition]:
    found = set()
    if k.oom_killed:
        found.add(Condition.OOM_KILLED)
    if k.agent_lost:
        found.add(Condition.EVICTED)
    if k.image_failed:
        found.add(Condition.IMAGE_PULL_FAILURE)
    return frozenset(found)


def attempt_conditions(cause: Cause, root: KernelOutcome | None, never_placed: bool) -> frozenset[Condition]:
    found = set(kernel_conditions(root)) if root else set()
    if cause in _CAUSE_CONDITIONS:
        found.add(_CAUSE_CONDITIONS[cause])
    if cause is Cause.SCHEDULER_TIMEOUT and never_placed:
        found.add(Condition.UNSCHEDULABLE)
    return frozenset(found)


def kernel_facts(
    cause: Cause, role: str, k: KernelOutcome, termination_log: str | None, tail: object
) -> KernelFacts:
    """One failed kernel as a rule with a kernel_role sees it (its own code, conditions, message)."""
    record = error_record(k)
    written = record.message if record.source is not Source.SYNTHESIZED else None
    shown = log_tail(tail) if isinstance(tail, str) else ""
    return KernelFacts(
        role=role,
        exit_code=k.exit_code,
        conditions=attempt_conditions(cause, k, never_placed=False),
        message=termination_message(termination_log, written, shown),
    )


def log_tail(text: str) -> str:
    """The last 80 lines / 2 KiB of a kernel's output."""
    tail = "\n".join(text.splitlines()[-LOG_TAIL_LINES:])
    return tail[-LOG_TAIL_BYTES:]


@dataclass(frozen=True)
class CategoryRule:
    """An operator's failure category (Armada's categorizer): every matcher given must hold."""

    name: str
    """The category a match adds."""
    on_exit_codes: ExitCodes | None = None
    """Exit codes In/NotIn (0 and a missing code never match)."""
    on_conditions: frozenset[Condition] = frozenset()
    """Any of these conditions."""
    on_termination_message: str | None = None
    """Regex searched in the termination message."""
    on_log_tail: str | None = None
    """Regex searched in the log tail."""
    kernel_role: str | None = None
    """Only this role's failures."""

    def matches(self, f: FailureFacts) -> bool:
        return common_match(
            f, self.kernel_role, self.on_exit_codes, self.on_conditions, self.on_termination_message
        ) and (self.on_log_tail is None or bounded_search(self.on_log_tail, f.log_tail))


# Shipped defaults (the operator may replace them through the cluster config).
DEFAULT_CATEGORIES: tuple[dict[str, Any], ...] = (
    {"name": "cuda_oom", "on_log_tail": {"pattern": r"CUDA out of memory|CUDA_ERROR_OUT_OF_MEMORY"}},
    {"name": "cuda_error", "on_log_tail": {"pattern": r"CUDA error|CUDA_ERROR_|cudaError"}},
    {"name": "nccl_error", "on_log_tail": {"pattern": r"NCCL error|ncclSystemError|ncclInternalError"}},
    {"name": "infiniband_error", "on_log_tail": {"pattern": r"ibv_|InfiniBand|mlx5|IBV_WC_"}},
    {"name": "host_oom", "on_conditions": ["oom_killed"]},
)


def category_from(raw: Mapping[str, Any], field: str) -> CategoryRule:
    try:
        return CategoryRule(
            name=str(raw["name"]),
            **common_fields(raw, field),
            on_log_tail=pattern_from(raw.get("on_log_tail"), f"{field}.on_log_tail"),
        )
    except PolicyError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise PolicyError(field, f"not a failure category rule: {exc}") from None


def categories_from(raw: Sequence[Mapping[str, Any]]) -> tuple[CategoryRule, ...]:
    return tuple(category_from(r, f"failure_categories.{i}") for i, r in enumerate(raw))


def categorise(rules: Sequence[CategoryRule], facts: FailureFacts) -> frozenset[str]:
    """First match wins: at most one category per failure."""
    for rule in rules:
        if rule.matches(facts):
            return frozenset({rule.name})
    return frozenset()


def termination_message(termination_log: str | None, record_message: str | None, tail: str) -> str:
    """The termination log, else the root-cause record's message, else the log tail (at most the
    last 4096 characters: rules search it)."""
    found = (termination_log or "").strip() or (record_message or "").strip() or tail
    return found[-MESSAGE_CHARS:]
