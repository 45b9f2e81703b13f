"""Projects and their configuration."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field, StringConstraints

from corral.api.schemas.session_in import PriorityRulesIn, RetryPolicyIn
from corral.protocol.types import STRICT, Name


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
