"""Agent settings (CORRAL_AGENT_ prefix; CLI flags override)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from pydantic_settings import BaseSettings, SettingsConfigDict


class AgentSettings(BaseSettings):
    """One agent: where its manager is, what it declares, where it keeps kernel files."""

    model_config = SettingsConfigDict(env_prefix="CORRAL_AGENT_", extra="ignore")

    manager: str = "http://127.0.0.1:8470"
    token: str = ""
    id: str = socket.gethostname()
    address: str = "127.0.0.1"
    resource_group: str = "default"
    cpu: float | None = None
    mem: str | None = None
    gpu: int | None = None
    slots: dict[str, float] = {}
    work_dir: Path = Path("/tmp/corral-agent")
    memory_mode: str = "auto"
    grace: float = 10.0
    # Name -> environment spec (agent/images.py): what sessions naming an `image` run in here.
    images: dict[str, Any] = {}
    # When started as root: the account kernels of owners with no mapped uid run as.
    kernel_user: str = "corral"
    allow_root_kernels: bool = False
    # Kernels that join cgroups or change account start through a compiled helper (agent/spawn.c);
    # false: through its Python fallback (the same steps at ten times the CPU).
    spawn_helper: bool = True
    # LOW-HIGH: ports the manager may choose for a gang's rank 0 here (see domain/rendezvous.py).
    rendezvous_ports: str | None = None
    # LOW-HIGH: ports this agent gives deployment replicas as $CORRAL_PORT (agent/probe.py).
    serve_ports: str = "30000-32767"
    # Tells the manager a restart of this very agent from a twin (random when unset).  Only a
    # process supervisor that has seen the previous incarnation die may give it again (`corral up`).
    instance: str | None = None
