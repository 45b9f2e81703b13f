"""The cluster's configuration (retry defaults, categories) and its audit trail."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from corral.api.schemas.policies import BackoffIn, ConditionIn, ExitCodesIn, PatternIn
from corral.api.schemas.session_in import RetryPolicyIn
from corral.domain.records import AuditRecord
from corral.protocol.types import STRICT, Name, Text


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


class WebhooksConfigIn(BaseModel):
    model_config = STRICT

    allow_private: bool | None = Field(
        None, description="webhooks may target loopback, link-local and private addresses (default false)"
    )


class ClusterConfigIn(BaseModel):
    """A partial change: only the fields given change."""

    model_config = STRICT

    retry: RetryConfigIn | None = None
    failure_categories: list[CategoryIn] | None = Field(None, max_length=200)
    webhooks: WebhooksConfigIn | None = None

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
        if self.webhooks is not None and self.webhooks.allow_private is not None:
            out["webhooks.allow_private"] = self.webhooks.allow_private
        if self.failure_categories is not None:
            out["failure_categories"] = [
                c.model_dump(mode="json", exclude_none=True) for c in self.failure_categories
            ]
        return out


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
