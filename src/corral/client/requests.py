"""What a call sends, typed for the caller's type checker (TypedDicts cost nothing at run time).

The server judges every value; a refusal comes back as `CorralError` naming the field. The full
shapes, with their bounds, are the HTTP API's request schemas (docs/api.md).
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict


class RetryPolicy(TypedDict, total=False):
    """An inline retry policy (docs/retries.md); durations in seconds or as "10s", "5m"."""

    max_retries: int
    retry_delay: float | str
    backoff: Literal["fixed", "exponential"]
    backoff_multiplier: float
    max_retry_delay: float | str
    jitter: str
    jitter_ratio: float
    eligible_causes: list[str]
    emit_retry_events: bool
    anti_affinity: str
    max_retry_duration: float | str


class SessionRequest(TypedDict, total=False):
    """A session to create: only `command` is required."""

    command: list[str]
    name: str
    type: str
    resources: dict[str, float | int | str]
    cluster_size: int
    priority: int
    resource_group: str
    project: str
    placement: Literal["concentrated", "dispersed"]
    env: dict[str, str]
    image: str
    workdir: str
    timeout: int
    error_strategy: str
    retry_policy: RetryPolicy
    retry_policies: list[str]
    creation_id: str


class PriorityRules(TypedDict, total=False):
    default: int
    may_change: bool
    min: int
    max: int


class GroupChanges(TypedDict, total=False):
    preemptible_priority: int
    preemption_order: Literal["oldest", "newest"]
    preemption_mode: Literal["terminate", "suspend"]
    grace_period: float
    min_runtime: float
    pending_timeout: float | None
    max_reschedules: int | None


class WebhookChanges(TypedDict, total=False):
    url: str
    events: list[str]
    project: str | None
    description: str
    enabled: bool


class ProjectChanges(TypedDict, total=False):
    retry_defaults: RetryPolicy | None
    retry_policies: list[str]
    priority_rules: PriorityRules | None


class UserChanges(TypedDict, total=False):
    role: Literal["admin", "user"]
    projects: list[str]
    priority_rules: PriorityRules | None
    run_as: dict[str, int] | None
    default_project: str | None


Json = dict[str, Any]
