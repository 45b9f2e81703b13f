"""Orders: what the manager wants of an agent's kernels, answered to its long poll.

An order that has the agent prepare or start a kernel carries the kernel's spec: everything the
agent needs to run it (command, environment, resources, rendezvous, identity), typed here so that
the agent reads it by attribute and a reply it does not understand is refused, not guessed at.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from corral.domain.resources import CPU, MEM
from corral.protocol.messages import RECORDED, Status
from corral.protocol.types import REPLY, REQUEST, Name, Serial, Text128, Text256


class RunAs(BaseModel):
    """The account a kernel runs as on agents started as root (its owner's mapping)."""

    model_config = REPLY

    uid: int
    gid: int | None = None


class ServeSpec(BaseModel):
    """A deployment replica's health check: the agent gives the kernel a port (`$CORRAL_PORT`) and
    probes `GET http://127.0.0.1:$CORRAL_PORT{path}` (DESIGN §7)."""

    model_config = REPLY

    path: str
    interval: float
    timeout: float
    healthy_threshold: int
    unhealthy_threshold: int
    initial_delay: float


class KernelSpec(BaseModel):
    """One kernel's spec, as an order carries it."""

    model_config = REPLY

    session_name: str | None
    command: tuple[str, ...]
    env: dict[str, str]
    image: str | None
    workdir: str | None
    resources: dict[str, str] = Field(description="the kernel's slots (decimal amounts as text)")
    cluster_size: int
    rank: int
    role: str
    hosts: tuple[str, ...]
    master_addr: str
    master_port: int | None
    pick_master_port: bool = Field(description="rank 0's agent picks a free port (none chosen at placement)")
    start_at_once: bool = Field(
        description="prepare and start in one go: the rendezvous is known (else the start order brings it)"
    )
    attempt: int
    resume_count: int
    array_id: str | None
    array_index: int | None
    max_attempts: int
    checkpoint_dir: str | None
    error_strategy: str
    gpu_devices: tuple[int, ...]
    worker_name: str
    root_session_id: str
    timeout_grace: float
    run_as: RunAs | None = Field(description="the owner's uid/gid (else the agent's default account)")
    serve: ServeSpec | None = Field(default=None, description="a deployment's replica: its health check")

    def mem_limit(self) -> int:
        """Bytes of memory the kernel may use (0: no limit)."""
        return int(float(self.resources.get(MEM, 0)))

    def cpus(self) -> float:
        """Cores the kernel may use (0: no limit)."""
        return float(self.resources.get(CPU, 0))


class KernelOrder(BaseModel):
    model_config = REPLY

    kernel_id: str
    session_id: str
    rank: int
    generation: int
    status: Status
    kill: bool
    force: bool = False
    grace: float | None = Field(
        default=None, description="seconds from SIGTERM to SIGKILL (else the agent's own)"
    )
    spec: KernelSpec | None = Field(
        default=None,
        description="where the agent must act on it: prepare or start orders of kernels not started",
    )


class OrdersIn(BaseModel):
    model_config = REQUEST

    agent_id: Name
    epoch: Serial
    seen: Text128 = ""
    wait: float = Field(default=0.0, ge=0, le=60)
    started: list[Text256] = Field(
        default_factory=list,
        max_length=100_000,
        description="kernels (`<kernel id>.<generation>`) this agent has started: their orders carry no spec",
    )


class OrdersOut(BaseModel):
    model_config = REPLY

    fingerprint: str
    orders: list[KernelOrder]
    recorded: bool = Field(description=RECORDED)
