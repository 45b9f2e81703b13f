"""What the agent tells its supervisor (JSON lines on the supervisor's stdin): typed commands, built
by the agent and read back by the supervisor as the same models, so neither side reads a field by
its key.  Unknown fields are refused: both ends are one package, so one would be a bug."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

_COMMAND = ConfigDict(extra="forbid", frozen=True)


class Account(BaseModel):
    """The account a kernel runs as, when it is not the supervisor's own."""

    model_config = _COMMAND

    uid: int
    gid: int


class Start(BaseModel):
    """Start a kernel: its process joins its cgroups, drops to `user` and runs `command` in `cwd`
    with `env`, its output appended to `stdout` and `stderr`."""

    model_config = _COMMAND

    op: Literal["start"] = "start"
    key: str
    command: tuple[str, ...] = Field(min_length=1)
    env: dict[str, str]
    cwd: str
    stdout: str
    stderr: str
    mem_limit: int = 0
    """Bytes; 0: no limit of its own."""
    cpus: float = 0.0
    """CPUs its cgroup may use; 0: no quota."""
    grace: float = 10.0
    """Seconds from SIGTERM to SIGKILL when it is stopped."""
    user: Account | None = None


class Term(BaseModel):
    """SIGTERM to the kernel's tree, SIGKILL after the grace period (the start's, without one)."""

    model_config = _COMMAND

    op: Literal["term"] = "term"
    key: str
    grace: float | None = None


class Kill(BaseModel):
    """SIGKILL to the kernel's tree now."""

    model_config = _COMMAND

    op: Literal["kill"] = "kill"
    key: str


class Ping(BaseModel):
    """The agent is alive and may keep its kernels until `fence_at` (CLOCK_MONOTONIC, one clock for
    every process of the host)."""

    model_config = _COMMAND

    op: Literal["ping"] = "ping"
    fence_at: float


Command = Start | Term | Kill | Ping
COMMANDS: TypeAdapter[Command] = TypeAdapter(Annotated[Command, Field(discriminator="op")])
