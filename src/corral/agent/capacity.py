"""What this node offers: detected CPUs, memory and GPUs (NVML when present), all overridable."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import psutil

from corral.agent.settings import AgentSettings
from corral.domain.resources import parse_mem


def detect_gpus() -> int:
    try:
        import pynvml
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return 0


def capacity(cfg: AgentSettings) -> dict[str, Any]:
    cpu = cfg.cpu if cfg.cpu is not None else psutil.cpu_count() or 1
    mem = parse_mem(cfg.mem) if cfg.mem is not None else psutil.virtual_memory().total
    gpu = cfg.gpu if cfg.gpu is not None else detect_gpus()
    return {"cpu": str(cpu), "mem": mem, "gpu": gpu, **{k: str(v) for k, v in cfg.slots.items()}}


def ephemeral_ports() -> tuple[int, int] | None:
    """This host's range of ports handed out to any socket that asks (None: unknown)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed listener's TIME_WAIT is no owner
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True
