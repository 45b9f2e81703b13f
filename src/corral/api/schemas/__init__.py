"""API shapes (pydantic), one module per resource: not the domain types, and never ORM rows.

Every shape is importable from here."""

from __future__ import annotations

from corral.api.schemas.agents import AgentOut
from corral.api.schemas.arrays import MAX_BULK, ArrayOut, BulkCreate, BulkItemOut, BulkOut
from corral.api.schemas.cluster import AuditOut, CategoryIn, ClusterConfigIn, RetryConfigIn
from corral.api.schemas.common import (
    ENV_NAME,
    MAX_COMMAND_ARGS,
    MAX_COMMAND_BYTES,
    MAX_ENV_BYTES,
    MAX_ENV_VARS,
    MAX_TIMEOUT,
    CreationId,
    Duration,
    EnvName,
    Workdir,
)
from corral.api.schemas.events import EventOut
from corral.api.schemas.logs import LogChunkOut, LogsOut
from corral.api.schemas.policies import (
    BackoffIn,
    ConditionIn,
    ExitCodesIn,
    MetadataIn,
    PatternIn,
    PolicyDoc,
    PolicyOut,
    PolicySpecIn,
    RuleIn,
)
from corral.api.schemas.projects import ProjectIn, ProjectOut, ProjectPatch
from corral.api.schemas.session_in import PriorityRulesIn, RetryPolicyIn, SessionCreate
from corral.api.schemas.session_out import (
    ErrorRecordOut,
    HistoryOut,
    KernelOut,
    SessionOut,
    errors_of,
    root_cause_of,
)

__all__ = [
    "ENV_NAME",
    "MAX_BULK",
    "MAX_COMMAND_ARGS",
    "MAX_COMMAND_BYTES",
    "MAX_ENV_BYTES",
    "MAX_ENV_VARS",
    "MAX_TIMEOUT",
    "AgentOut",
    "ArrayOut",
    "AuditOut",
    "BackoffIn",
    "BulkCreate",
    "BulkItemOut",
    "BulkOut",
    "CategoryIn",
    "ClusterConfigIn",
    "ConditionIn",
    "CreationId",
    "Duration",
    "EnvName",
    "ErrorRecordOut",
    "EventOut",
    "ExitCodesIn",
    "HistoryOut",
    "KernelOut",
    "LogChunkOut",
    "LogsOut",
    "MetadataIn",
    "PatternIn",
    "PolicyDoc",
    "PolicyOut",
    "PolicySpecIn",
    "PriorityRulesIn",
    "ProjectIn",
    "ProjectOut",
    "ProjectPatch",
    "RetryConfigIn",
    "RetryPolicyIn",
    "RuleIn",
    "SessionCreate",
    "SessionOut",
    "Workdir",
    "errors_of",
    "root_cause_of",
]
