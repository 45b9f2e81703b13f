"""A session's request as one value: it travels API -> service -> store -> retry child unchanged."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from corral.domain.cause import Cause
from corral.domain.placement import PlacementStrategy
from corral.domain.resources import ResourceSlots


class SessionType(StrEnum):
    BATCH = "batch"
    INTERACTIVE = "interactive"
    INFERENCE = "inference"


class ErrorStrategy(StrEnum):
    SINGLE = "single"
    EARLIEST = "earliest"
    EARLIEST_PRIMARY = "earliest_primary"


class Backoff(StrEnum):
    FIXED = "fixed"
    EXPONENTIAL = "exponential"


class Jitter(StrEnum):
    NONE = "none"
    DETERMINISTIC = "deterministic"
    RANDOM = "random"


class AntiAffinity(StrEnum):
    NONE = "none"
    NODE = "node"


# The "yes" rows of DESIGN §4: what the inline policy retries unless told otherwise.
DEFAULT_ELIGIBLE = frozenset(
    {
        Cause.AGENT_TRANSIENT,
        Cause.SCHEDULER_TIMEOUT,
        Cause.IMAGE_PULL_FAILURE,
        Cause.KERNEL_NONZERO_EXIT,
        Cause.OOM_KILLED,
        Cause.UNKNOWN,
    }
)
MAX_RETRY_DELAY_CEILING = 24 * 3600.0
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: object) -> float:
    """Seconds from a number or a string like "10s", "5m", "2h" (kubectl/Armada style)."""
    if isinstance(value, bool):
        raise ValueError("a duration must be seconds or a string like '10s', '5m'")
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:
            raise ValueError("a duration must be at most 10 years") from None
    elif isinstance(value, str):
        raw = value.strip().lower()
        unit = raw[-1:] if raw[-1:] in _UNITS and raw[-1:] != "" else ""
        number = raw[: -len(unit)] if unit else raw
        try:
            seconds = float(number.replace("_", "!")) * _UNITS[unit]
        except (ValueError, OverflowError):
            raise ValueError(f"cannot read {value[:40]!r} as a duration (e.g. 10s, 5m, 2h)") from None
    else:
        raise ValueError("a duration must be seconds or a string like '10s', '5m'")
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise ValueError("a duration must be finite")
    if seconds < 0:
        raise ValueError("a duration must not be negative")
    return seconds + 0.0  # -0.0 becomes 0.0


@dataclass(frozen=True)
class RetryPolicy:
    """The inline retry policy of a create request (DESIGN §5); the engine acts on it."""

    max_retries: int = 0
    """Budget-consuming retries allowed after the first attempt."""
    retry_delay: float = 60.0
    """Seconds before the first retry (0: at once)."""
    backoff: Backoff = Backoff.FIXED
    """How the delay grows with each retry."""
    backoff_multiplier: float = 2.0
    """Growth factor of exponential backoff."""
    max_retry_delay: float = 3600.0
    """Upper bound of any delay (at most 24 h)."""
    jitter: Jitter = Jitter.DETERMINISTIC
    """How the delay is spread."""
    jitter_ratio: float = 0.25
    """Spread as a fraction of the delay."""
    eligible_causes: frozenset[Cause] = DEFAULT_ELIGIBLE
    """Causes the inline policy retries."""
    emit_retry_events: bool = True
    """Whether retry events are published for this session."""
    anti_affinity: AntiAffinity = AntiAffinity.NONE
    """Whether a retry avoids the node of the previous root cause."""
    max_retry_duration: float | None = None
    """Seconds from the first attempt's start after which no retry starts."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = sorted(value) if isinstance(value, frozenset) else value
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RetryPolicy:
        return cls(
            max_retries=int(raw.get("max_retries", 0)),
            retry_delay=float(raw.get("retry_delay", 60.0)),
            backoff=Backoff(raw.get("backoff", Backoff.FIXED)),
            backoff_multiplier=float(raw.get("backoff_multiplier", 2.0)),
            max_retry_delay=float(raw.get("max_retry_delay", 3600.0)),
            jitter=Jitter(raw.get("jitter", Jitter.DETERMINISTIC)),
            jitter_ratio=float(raw.get("jitter_ratio", 0.25)),
            eligible_causes=frozenset(
                Cause(c)
                for c in (DEFAULT_ELIGIBLE if raw.get("eligible_causes") is None else raw["eligible_causes"])
            ),
            emit_retry_events=bool(raw.get("emit_retry_events", True)),
            anti_affinity=AntiAffinity(raw.get("anti_affinity", AntiAffinity.NONE)),
            max_retry_duration=(
                float(raw["max_retry_duration"]) if raw.get("max_retry_duration") is not None else None
            ),
        )


UNNAMED_PROJECT = ""
"""A request that named no project: the service picks the caller's (services/sessions.prepared)."""


@dataclass(frozen=True)
class SessionSpec:
    """What a user asked for; everything else about a session is state the coordinator keeps."""

    command: tuple[str, ...]
    """argv of each kernel's main process."""
    resources: ResourceSlots = field(default_factory=lambda: ResourceSlots.parse({"cpu": 1}))
    """Per kernel."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment of each kernel (may hold secrets: never logged)."""
    name: str | None = None
    """Display name (a default is derived from the id)."""
    type: SessionType = SessionType.BATCH
    """Only batch sessions retry."""
    cluster_size: int = 1
    """Kernels, placed all or none."""
    priority: int = 10
    """0..100, higher first."""
    resource_group: str = "default"
    """Where it runs."""
    project: str = "default"
    """Whose it is (visibility)."""
    placement: PlacementStrategy = PlacementStrategy.CONCENTRATED
    """How a gang spreads over agents."""
    image: str | None = None
    """Runtime environment the agent prepares."""
    timeout: int | None = None
    """Seconds from start, then deadline_exceeded."""
    error_strategy: ErrorStrategy = ErrorStrategy.SINGLE
    """How the root-cause error is chosen (the API defaults it by cluster size)."""
    retry_policy: RetryPolicy | None = None
    """Inline retry policy."""
    retry_policies: tuple[str, ...] = ()
    """Named policies this session adds."""
    creation_id: str | None = None
    """Idempotency key, unique per owner."""
    array_id: str | None = None
    """The job array it is an element of (None: a session of its own)."""
    array_index: int | None = None
    """Its index in that array (its kernels see $CORRAL_ARRAY_INDEX)."""
    workdir: str | None = None
    """Where each kernel starts, an absolute path (None: its private directory, $CORRAL_WORK_DIR)."""

    @property
    def max_retries(self) -> int:
        return self.retry_policy.max_retries if self.retry_policy else 0

    def fingerprint(self) -> dict[str, Any]:
        """A comparable form: the same request again has the same fingerprint."""
        return {
            "command": list(self.command),
            "resources": self.resources.nonzero().to_json(),
            "env": dict(sorted(self.env.items())),
            "name": self.name,
            "type": str(self.type),
            "cluster_size": self.cluster_size,
            "priority": self.priority,
            "resource_group": self.resource_group,
            "project": self.project,
            "placement": str(self.placement),
            "image": self.image,
            "timeout": self.timeout,
            "error_strategy": str(self.error_strategy),
            "retry_policy": self.retry_policy.to_json() if self.retry_policy else None,
            "retry_policies": list(self.retry_policies),
            **({"workdir": self.workdir} if self.workdir is not None else {}),
        }

    def digest(self) -> str:
        """Tells the same request from a different one under one creation_id."""
        return hashlib.sha256(json.dumps(self.fingerprint(), sort_keys=True).encode()).hexdigest()
