"""What the supervisor tells the agent (JSON lines on its stdout), read into typed events once, as
the link receives them: the kernel's report is then built from attributes, never from keys."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

# Fields a newer supervisor adds are ignored, not refused: an exit event dropped for one would leave
# its kernel running for ever, as far as the agent knows (both are one package: it does not happen).
_EVENT = ConfigDict(extra="ignore", frozen=True)


class Started(BaseModel):
    """The kernel's first process runs."""

    model_config = _EVENT

    ev: Literal["started"] = "started"
    key: str
    pid: int


class Exited(BaseModel):
    """The kernel's main process ended (or it could not be started: `start_error`)."""

    model_config = _EVENT

    ev: Literal["exited"] = "exited"
    key: str = ""
    exit_code: int | None = None
    exited_at_ns: int | None = None
    oom_killed: bool = False
    killed_by_corral: bool = False
    start_error: str | None = None
    oom_kill_counter: dict[str, int] | None = None
    memory_mode: str | None = None
    cpu_mode: str | None = None
    cpu_seconds: float | None = None
    wall_seconds: float | None = None
    cgroup: str | None = None

    def detail(self) -> dict[str, object]:
        """What the kernel's report keeps of it as detail (the fields it has)."""
        return self.model_dump(include=_DETAIL, exclude_none=True)


_DETAIL = {
    "oom_kill_counter",
    "memory_mode",
    "cpu_mode",
    "cpu_seconds",
    "wall_seconds",
    "cgroup",
    "start_error",
}


class FencedAll(BaseModel):
    """The agent stopped pinging past its deadline: the supervisor killed every kernel."""

    model_config = _EVENT

    ev: Literal["fenced"] = "fenced"
    kernels: int


class Failed(BaseModel):
    """A command the supervisor could not carry out (not about one kernel)."""

    model_config = _EVENT

    ev: Literal["error"] = "error"
    error: str


Event = Annotated[Started | Exited | FencedAll | Failed, Field(discriminator="ev")]
EVENTS: TypeAdapter[Started | Exited | FencedAll | Failed] = TypeAdapter(Event)
