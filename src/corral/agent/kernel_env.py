"""A kernel's environment: the agent's own (without Corral's configuration), the spec's, and the
variables Corral sets for every kernel (identity, rendezvous, files, devices)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from corral.agent.identity import Account, reachable
from corral.agent.images import Environment
from corral.agent.kernel_files import KernelFiles
from corral.protocol.orders import KernelSpec

WORKER_LIB = Path(__file__).resolve().parent.parent / "workerlib"

_CHECKED: dict[tuple[str, str], tuple[float, Any]] = {}
RECHECK = 10.0  # seconds: directories' permissions change rarely; a kernel start is frequent


def rechecked(kind: str, key: str, check: Callable[[], Any]) -> Any:
    """`check()`, remembered for RECHECK seconds: walking each directory's ancestors on every
    kernel start would cost more than the start itself on a busy agent."""
    seen = _CHECKED.get((kind, key))
    if seen is not None and time.monotonic() - seen[0] < RECHECK:
        return seen[1]
    found = check()
    now = time.monotonic()
    if len(_CHECKED) > 1000:  # keys include user-given checkpoint dirs: forget what has expired
        for old in [k for k, (at, _) in _CHECKED.items() if now - at >= RECHECK]:
            del _CHECKED[old]
    _CHECKED[(kind, key)] = (now, found)
    return found


def _reachable_path(value: str | None) -> str:
    """The entries of PATH every account can reach."""
    value = value if value is not None else os.defpath
    return str(
        rechecked(
            "path",
            value,
            lambda: os.pathsep.join(p for p in value.split(os.pathsep) if p and reachable(Path(p))),
        )
    )


@cache
def _inherited() -> dict[str, str]:
    """The agent's environment, as every kernel inherits it: nothing of Corral's own configuration
    (tokens, keys, data paths).  Read once: the agent's environment is set when it starts, and
    reading os.environ decodes every entry again."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_") and k != "XDG_CONFIG_HOME"}


def kernel_env(
    spec: KernelSpec,
    kernel_id: str,
    session_id: str,
    files: KernelFiles,
    checkpoint_dir: Path,
    account: Account | None = None,
    worker_lib: Path = WORKER_LIB,
    environment: Environment | None = None,
) -> dict[str, str]:
    """`account`: the kernel runs as another account than the agent's; `environment`: its image's
    (first on PATH, before what the spec's own PATH says)."""
    env = dict(_inherited())
    if account is not None:
        # Its own name, a home it can write (not root's), and only the PATH entries it can reach
        # (a root agent's PATH often starts in /root, where `python3` would be "Permission denied").
        home = account.home or str(files.stdout.parent)
        env.update(HOME=home, USER=account.name, LOGNAME=account.name, PATH=_reachable_path(env.get("PATH")))
    env.update(spec.env)
    if environment is not None:
        environment.apply(env)
    env.update(
        CORRAL_SESSION_ID=session_id,
        CORRAL_KERNEL_ID=kernel_id,
        CORRAL_ATTEMPT=str(spec.attempt),
        CORRAL_MAX_ATTEMPTS=str(spec.max_attempts),
        CORRAL_CLUSTER_SIZE=str(spec.cluster_size),
        CORRAL_CLUSTER_RANK=str(spec.rank),
        CORRAL_CLUSTER_ROLE=spec.role,
        CORRAL_CLUSTER_HOSTS=",".join(spec.hosts),
        MASTER_ADDR=spec.master_addr,
        MASTER_PORT=str(spec.master_port or ""),
        WORLD_SIZE=str(spec.cluster_size),
        RANK=str(spec.rank),
        CORRAL_WORKER_NAME=spec.worker_name,
        CORRAL_ERROR_STRATEGY=spec.error_strategy,
        CORRAL_ERROR_FILE=str(files.error),
        TORCHELASTIC_ERROR_FILE=str(files.error),
        CORRAL_TERMINATION_LOG=str(files.termination),
        CORRAL_CHECKPOINT_DIR=str(checkpoint_dir),
        CORRAL_RESUME_COUNT=str(spec.resume_count),
        # Only the devices allocated to it (none: empty, so a GPU node's devices stay hidden).
        CUDA_VISIBLE_DEVICES=",".join(str(d) for d in spec.gpu_devices),
        PYTHONUNBUFFERED="1",
        # `import corral_worker` works in any kernel's python3, with nothing installed.
        PYTHONPATH=os.pathsep.join(p for p in (str(worker_lib), env.get("PYTHONPATH", "")) if p),
    )
    if spec.array_id is not None:
        env.update(CORRAL_ARRAY_ID=spec.array_id, CORRAL_ARRAY_INDEX=str(spec.array_index or 0))
    return env
