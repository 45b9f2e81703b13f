"""Named retry policies: the documents a client sends and reads."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, StringConstraints

from corral.api.schemas.common import Duration
from corral.domain.policy import CodeOperator, Condition, DefaultAction, RuleAction
from corral.domain.spec import MAX_RETRY_DELAY_CEILING, AntiAffinity
from corral.protocol.types import STRICT, Name

# Armada/Kubernetes spell conditions and actions in CamelCase; both spellings are accepted.
_CAMEL = {
    "OOMKilled": "oom_killed",
    "Evicted": "evicted",
    "Preempted": "preempted",
    "DeadlineExceeded": "deadline_exceeded",
    "Unschedulable": "unschedulable",
    "ImagePullFailure": "image_pull_failure",
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
