"""API shapes of retry configuration: named policies, cluster config, projects, events, audit."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, StringConstraints

from corral.api.schemas import Duration, PriorityRulesIn, RetryPolicyIn
from corral.domain.policy import CodeOperator, Condition, DefaultAction, RuleAction
from corral.domain.records import AuditRecord, EventRecord
from corral.domain.spec import MAX_RETRY_DELAY_CEILING, AntiAffinity
from corral.protocol.types import STRICT, Name, Text

# Armada/Kubernetes spell conditions and actions in CamelCase; both spellings are accepted.
_CAMEL = {
    "OOMKilled": "oom_killed",
    "Evicted": "evicted",
    "Preempted": "preempted",
    "DeadlineExceeded": "deadline_exceeded",
    "Unschedulable": "unschedulable",
}


def _condition(value: Any) -> Any:
    return _CAMEL.get(value, value) if isinstance(value, str) else value


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


ConditionIn = Annotated[Condition, Strict(False), BeforeValidator(_condition)]
Pattern = Annotated[str, StringConstraints(min_length=1, max_length=1000)]
Limit = Annotated[int, Field(ge=0, le=1000)]


class ExitCodesIn(BaseModel):
    model_config = STRICT

    operator: Annotated[CodeOperator, Strict(False)]
    values: list[Annotated[int, Field(ge=0, le=255)]] = Field(min_length=1, max_length=256)


class PatternIn(BaseModel):
    model_config = STRICT

    pattern: Pattern = Field(description="a regular expression (Python syntax), searched")


class BackoffIn(BaseModel):
    model_config = STRICT

    initial_delay: Duration = Field(0.0, ge=0, le=MAX_RETRY_DELAY_CEILING)
    max_delay: Duration = Field(600.0, ge=0, le=MAX_RETRY_DELAY_CEILING)
    multiplier: float = Field(2.0, ge=1.0, le=100.0, allow_inf_nan=False)


class RuleIn(BaseModel):
    model_config = STRICT

    action: Annotated[RuleAction, Strict(False), BeforeValidator(_lower)]
    on_exit_codes: ExitCodesIn | None = None
    on_conditions: list[ConditionIn] = Field(default_factory=list, max_length=8)
    on_termination_message: PatternIn | None = None
    on_failure_category: list[Name] = Field(default_factory=list, max_length=64)
    on_recoverable: bool | None = None
    kernel_role: Literal["main", "sub"] | None = None
    retry_limit: Limit | None = None
    backoff: BackoffIn | None = None
    anti_affinity: Annotated[AntiAffinity, Strict(False)] | None = None


class PolicySpecIn(BaseModel):
    model_config = STRICT

    retry_limit: Limit | None = None
    default_action: Annotated[DefaultAction, Strict(False), BeforeValidator(_lower)] = DefaultAction.FAIL
    backoff: BackoffIn | None = None
    anti_affinity: Annotated[AntiAffinity, Strict(False)] = AntiAffinity.NONE
    rules: list[RuleIn] = Field(default_factory=list, max_length=100)


class MetadataIn(BaseModel):
    model_config = STRICT

    name: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._\-]{0,127}$")] = Field(
        description="lower-case letters, digits, '.', '_' or '-'"
    )


class PolicyDoc(BaseModel):
    """A policy document, kubectl style (the YAML of `corral policy apply -f`)."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    api_version: Literal["corral/v1"] = Field("corral/v1", alias="apiVersion")
    kind: Literal["RetryPolicy"] = "RetryPolicy"
    metadata: MetadataIn
    spec: PolicySpecIn


class PolicyOut(BaseModel):
    api_version: str = Field("corral/v1", serialization_alias="apiVersion")
    kind: str = "RetryPolicy"
    metadata: dict[str, Any]
    spec: dict[str, Any]


class CategoryIn(BaseModel):
    model_config = STRICT

    name: Name
    on_exit_codes: ExitCodesIn | None = None
    on_conditions: list[ConditionIn] = Field(default_factory=list, max_length=8)
    on_termination_message: PatternIn | None = None
    on_log_tail: PatternIn | None = None
    kernel_role: Literal["main", "sub"] | None = None


class RetryConfigIn(BaseModel):
    model_config = STRICT

    enabled: bool | None = None
    global_max_retries: Annotated[int, Field(ge=0, le=10_000)] | None = None
    dispatch_rate: Annotated[float, Field(ge=0.01, le=100_000, allow_inf_nan=False)] | None = Field(
        None, description="retries dispatched per second, cluster-wide; null: no limit"
    )
    defaults: RetryPolicyIn | None = Field(
        None, description="inline policy fields every session gets; merged into the stored ones, null clears"
    )
    default_policy: Name | None = Field(
        None, description="a named policy for sessions whose project and themselves name none; null clears"
    )
    default_backoff: BackoffIn | None = Field(
        None, description="backoff of named policies and rules that give none (0 s, 10 min, 2.0); null clears"
    )


class ClusterConfigIn(BaseModel):
    """A partial change: only the fields given change."""

    model_config = STRICT

    retry: RetryConfigIn | None = None
    failure_categories: list[CategoryIn] | None = Field(None, max_length=200)

    def changes(self) -> dict[str, Any]:
        """Dotted keys of what was given (null is a value: e.g. no dispatch limit)."""
        out: dict[str, Any] = {}
        if self.retry is not None:
            for key in self.retry.model_fields_set:
                value = getattr(self.retry, key)
                if key == "defaults":  # merged into the stored defaults; null clears them
                    value = value.model_dump(mode="json", exclude_unset=True) if value is not None else None
                elif key == "default_backoff":  # replaced whole; null: Armada's defaults
                    value = value.model_dump(mode="json", exclude_unset=True) if value is not None else {}
                elif value is None and key not in ("dispatch_rate", "default_policy"):
                    continue
                out[f"retry.{key}"] = value
        if self.failure_categories is not None:
            out["failure_categories"] = [
                c.model_dump(mode="json", exclude_none=True) for c in self.failure_categories
            ]
        return out


class ProjectIn(BaseModel):
    model_config = STRICT

    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")]
    retry_defaults: RetryPolicyIn | None = None
    retry_policies: list[Name] = Field(default_factory=list, max_length=32)
    priority_rules: PriorityRulesIn | None = None


class ProjectPatch(BaseModel):
    model_config = STRICT

    retry_defaults: RetryPolicyIn | None = None
    retry_policies: list[Name] | None = Field(None, max_length=32)
    priority_rules: PriorityRulesIn | None = Field(None, description="merged field by field; null clears")


class ProjectOut(BaseModel):
    name: str
    retry_defaults: dict[str, Any]
    retry_policies: list[str]
    priority_rules: dict[str, Any] = Field(description="only the fields this project sets")
    created_at: datetime


class EventOut(BaseModel):
    id: int
    session_id: str
    type: str
    from_status: str | None
    to_status: str | None
    payload: dict[str, Any]
    created_at: datetime

    @classmethod
    def of(cls, e: EventRecord) -> EventOut:
        return cls(
            id=e.id,
            session_id=e.session_id,
            type=e.kind,
            from_status=e.from_status,
            to_status=e.to_status,
            payload=e.payload,
            created_at=e.created_at,
        )


class AuditOut(BaseModel):
    id: int
    actor: str
    action: str
    target: str
    reason: Text
    created_at: datetime

    @classmethod
    def of(cls, a: AuditRecord) -> AuditOut:
        return cls(**{k: getattr(a, k) for k in cls.model_fields})
