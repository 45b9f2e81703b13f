"""Session and kernel statuses (DESIGN §3)."""

from __future__ import annotations

from enum import StrEnum


class SessionStatus(StrEnum):
    PENDING = "PENDING"
    SCHEDULED = "SCHEDULED"
    PREPARING = "PREPARING"
    PULLING = "PULLING"
    PREPARED = "PREPARED"
    CREATING = "CREATING"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    CANCELLED = "CANCELLED"
    ERROR = "ERROR"
    SUSPENDED = "SUSPENDED"


# Kernels share the session's vocabulary; a separate enum keeps the two from being mixed up.
class KernelStatus(StrEnum):
    PENDING = "PENDING"
    SCHEDULED = "SCHEDULED"
    PREPARING = "PREPARING"
    PULLING = "PULLING"
    PREPARED = "PREPARED"
    CREATING = "CREATING"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    CANCELLED = "CANCELLED"
    ERROR = "ERROR"
    SUSPENDED = "SUSPENDED"


class SessionResult(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    UNDEFINED = "undefined"


class AgentStatus(StrEnum):
    ALIVE = "ALIVE"
    LOST = "LOST"


TERMINAL_SESSION = frozenset({SessionStatus.TERMINATED, SessionStatus.CANCELLED, SessionStatus.ERROR})
TERMINAL_KERNEL = frozenset({KernelStatus.TERMINATED, KernelStatus.CANCELLED, KernelStatus.ERROR})
# A kernel in these has failed whatever its exit code (any other has failed by a non-zero one).
FAILED_KERNEL = frozenset({KernelStatus.CANCELLED, KernelStatus.ERROR})
NON_TERMINAL_KERNEL = frozenset(KernelStatus) - TERMINAL_KERNEL
NON_TERMINAL_SESSION = frozenset(SessionStatus) - TERMINAL_SESSION

# Startup phases: the session holds an allocation but no kernel has been started yet, or is starting.
STARTUP_SESSION = frozenset(
    {
        SessionStatus.SCHEDULED,
        SessionStatus.PREPARING,
        SessionStatus.PULLING,
        SessionStatus.PREPARED,
        SessionStatus.CREATING,
    }
)
# Handed to its agent, no process reported yet (with a "prepare and start" order it may have one).
KERNEL_HANDED = frozenset({KernelStatus.PREPARING, KernelStatus.PULLING, KernelStatus.PREPARED})
# A kernel has started (its `started` flag) once reported in one of these.
KERNEL_STARTED = frozenset({KernelStatus.CREATING, KernelStatus.RUNNING})
# A process exists, or the agent was told to start one.
KERNEL_PROCESS = frozenset({KernelStatus.CREATING, KernelStatus.RUNNING, KernelStatus.TERMINATING})
# Kernel statuses in which the agent may have a live process for the kernel.
KERNEL_ON_AGENT = KERNEL_HANDED | KERNEL_PROCESS
# No process started by an order to start one: before CREATING.
KERNEL_NOT_STARTED = frozenset({KernelStatus.PENDING, KernelStatus.SCHEDULED}) | KERNEL_HANDED
