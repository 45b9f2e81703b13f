"""What a client sends to create a session: its spec, its inline retry policy, priority rules."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    field_validator,
    model_validator,
)

from corral.api.schemas.common import (
    MAX_COMMAND_ARGS,
    MAX_COMMAND_BYTES,
    MAX_ENV_BYTES,
    MAX_ENV_VARS,
    MAX_TIMEOUT,
    Duration,
    EnvName,
    Workdir,
    _default_resources,
)
from corral.domain.arrays import ELEMENT_KEY_MARK, MAX_ELEMENTS, MAX_INDEX, parse_indices
from corral.domain.cause import NEVER_RETRIABLE, Cause
from corral.domain.placement import PlacementStrategy
from corral.domain.priority import PRIORITY_MAX, PRIORITY_MIN
from corral.domain.resources import ResourceError, ResourceSlots
from corral.domain.retry import RETRY_KEY_MARK
from corral.domain.root_cause import default_strategy
from corral.domain.spec import (
    MAX_RETRY_DELAY_CEILING,
    UNNAMED_PROJECT,
    AntiAffinity,
    Backoff,
    ErrorStrategy,
    Jitter,
    RetryPolicy,
    SessionSpec,
    SessionType,
)
from corral.protocol.types import STRICT, Amount, Name, SlotName, Text, clean_text
from corral.services.errors import InvalidInput


class RetryPolicyIn(BaseModel):
    """DESIGN §5 inline policy; durations in seconds or as "10s", "5m"."""

    model_config = STRICT

    max_retries: int = Field(0, ge=0, le=1000)
    retry_delay: Duration = Field(60.0, ge=0, le=MAX_RETRY_DELAY_CEILING)
    backoff: Annotated[Backoff, Strict(False)] = Backoff.FIXED
    backoff_multiplier: float = Field(2.0, ge=1.0, le=100.0, allow_inf_nan=False)
    max_retry_delay: Duration = Field(3600.0, ge=0, le=MAX_RETRY_DELAY_CEILING)
    jitter: Annotated[Jitter, Strict(False)] = Jitter.DETERMINISTIC
    jitter_ratio: float = Field(0.25, ge=0.0, le=1.0, allow_inf_nan=False)
    eligible_causes: list[Annotated[Cause, Strict(False)]] | None = Field(None, max_length=len(Cause))
    emit_retry_events: bool = True
    anti_affinity: Annotated[AntiAffinity, Strict(False)] = AntiAffinity.NONE
    max_retry_duration: Duration | None = Field(None, ge=0, le=MAX_TIMEOUT)

    @field_validator("eligible_causes")
    @classmethod
    def _retriable(cls, causes: list[Cause] | None) -> list[Cause] | None:
        never = sorted(str(c) for c in causes or () if c in NEVER_RETRIABLE)
        if never:
            raise ValueError(f"{', '.join(never)} can never be retried")
        return causes

    def to_domain(self) -> RetryPolicy:
        data = self.model_dump()
        causes = data.pop("eligible_causes")
        policy = RetryPolicy(**data)
        return replace(policy, eligible_causes=frozenset(causes)) if causes is not None else policy


class SessionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, use_enum_values=False)

    command: list[Text] = Field(
        min_length=1, max_length=MAX_COMMAND_ARGS, description="argv of each kernel's main process"
    )
    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")] | None = Field(
        None, description="1-128 letters, digits, '.', '_' or '-'"
    )
    type: Annotated[SessionType, Strict(False)] = Field(
        SessionType.BATCH, description="batch (the only type a request may submit for now)"
    )
    resources: dict[SlotName, Amount] = Field(
        default_factory=_default_resources,
        max_length=32,
        description="per kernel: cpu cores (default 1, > 0), mem bytes or '64M', gpu devices, custom slots",
    )
    cluster_size: int = Field(1, ge=1, le=256)
    priority: int = Field(10, ge=0, le=100)
    resource_group: Name = "default"
    project: Name | None = Field(
        None,
        description="default: the caller's only project, else their default_project (set by an admin)",
    )
    placement: Annotated[PlacementStrategy, Strict(False)] = PlacementStrategy.CONCENTRATED
    env: dict[EnvName, Text] = Field(
        default_factory=dict,
        max_length=MAX_ENV_VARS,
        description="names [A-Za-z_][A-Za-z0-9_]*, not CORRAL_*",
    )
    image: Name | None = None
    workdir: Workdir | None = Field(
        None,
        description="absolute path each kernel starts in, as `sbatch --chdir` (default: its private"
        " directory, also $CORRAL_WORK_DIR); `corral run` sends the caller's working directory",
    )
    timeout: int | None = Field(
        None, gt=0, le=MAX_TIMEOUT, description="seconds from start; then deadline_exceeded"
    )
    error_strategy: Annotated[ErrorStrategy, Strict(False)] | None = Field(
        None,
        description="how a failed gang's root cause is chosen: single, earliest or earliest_primary "
        "(default: earliest_primary for cluster_size > 1, single for one kernel)",
    )
    retry_policy: RetryPolicyIn | None = None
    retry_policies: list[Name] = Field(default_factory=list, max_length=32)
    creation_id: (
        Annotated[str, StringConstraints(min_length=1, max_length=200), AfterValidator(clean_text)] | None
    ) = None
    array: Annotated[str, StringConstraints(max_length=200)] | None = Field(
        None,
        description="a job array: one session per index, e.g. '0-49', '1-1000:10', '1,3,5' (at most "
        f"{MAX_ELEMENTS} elements, indices up to {MAX_INDEX}); each sees $CORRAL_ARRAY_INDEX",
    )

    @field_validator("type")
    @classmethod
    def _batch_only(cls, value: SessionType) -> SessionType:
        # Inference sessions are a deployment's replicas and are made by it, never by a request;
        # interactive ones need an attach path that does not exist yet (refused rather than run
        # once as if they were batch sessions).
        if value is SessionType.INFERENCE:
            raise ValueError(
                "only batch sessions can be submitted (inference sessions are a deployment's"
                " replicas: corral deploy create)"
            )
        if value is not SessionType.BATCH:
            raise ValueError(f"only batch sessions can be submitted ({value} sessions are not supported yet)")
        return value

    @field_validator("creation_id")
    @classmethod
    def _creation_id(cls, value: str | None) -> str | None:
        if value is not None and RETRY_KEY_MARK in value:
            raise ValueError(f"{RETRY_KEY_MARK!r} is reserved for the keys of retries")
        if value is not None and ELEMENT_KEY_MARK in value:
            raise ValueError(f"{ELEMENT_KEY_MARK!r} is reserved for the keys of array elements")
        return value

    @field_validator("array")
    @classmethod
    def _array(cls, value: str | None) -> str | None:
        if value is not None:
            parse_indices(value)  # ArrayError is a ValueError: a 422 naming `array`
        return value

    def indices(self) -> tuple[int, ...] | None:
        """The array's indices (None: a single session)."""
        return parse_indices(self.array) if self.array is not None else None

    @field_validator("command")
    @classmethod
    def _command(cls, command: list[str]) -> list[str]:
        if not command[0]:
            raise ValueError("the program (first word) must not be empty")
        if sum(len(c.encode()) for c in command) > MAX_COMMAND_BYTES:
            raise ValueError(f"longer than {MAX_COMMAND_BYTES} bytes in total")
        return command

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        reserved = sorted(k for k in env if k.upper().startswith("CORRAL_"))
        if reserved:
            raise ValueError(f"{reserved[0]}: CORRAL_* names are set by Corral")
        if sum(len(k.encode()) + len(v.encode()) for k, v in env.items()) > MAX_ENV_BYTES:
            raise ValueError(f"longer than {MAX_ENV_BYTES} bytes in total")
        return env

    def to_spec(self) -> SessionSpec:
        """The domain value (resource amounts parsed here: errors name the slot)."""
        try:
            resources = ResourceSlots.parse({"cpu": 1, **self.resources}).nonzero()  # 1 CPU unless said
        except ResourceError as exc:
            raise InvalidInput(f"resources.{exc.field}", str(exc)) from exc
        if resources["cpu"] <= 0:
            # Capacity is counted in CPUs: a kernel asking for none could be placed without limit.
            raise InvalidInput("resources.cpu", "every kernel needs some CPU (e.g. 0.1 or '100m')")
        return SessionSpec(
            command=tuple(self.command),
            resources=resources,
            env=dict(self.env),
            name=self.name,
            type=self.type,
            cluster_size=self.cluster_size,
            priority=self.priority,
            resource_group=self.resource_group,
            project=self.project or UNNAMED_PROJECT,
            placement=self.placement,
            image=self.image,
            timeout=self.timeout,
            error_strategy=self.error_strategy or default_strategy(self.cluster_size),
            retry_policy=self.retry_policy.to_domain() if self.retry_policy else None,
            retry_policies=tuple(self.retry_policies),
            creation_id=self.creation_id,
            workdir=self.workdir,
        )


class PriorityRulesIn(BaseModel):
    """Fields left out keep their inherited value (user over project over the defaults)."""

    model_config = STRICT

    default: int | None = Field(
        None, ge=PRIORITY_MIN, le=PRIORITY_MAX, description="for sessions that ask none"
    )
    may_change: bool | None = Field(None, description="whether the caller may ask for another priority")
    min: int | None = Field(None, ge=PRIORITY_MIN, le=PRIORITY_MAX, description="lowest one may ask for")
    max: int | None = Field(None, ge=PRIORITY_MIN, le=PRIORITY_MAX, description="highest one may ask for")

    @model_validator(mode="after")
    def _range(self) -> PriorityRulesIn:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("min must not be above max")
        return self

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)
