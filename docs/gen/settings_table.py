"""The settings tables of docs/operations.md: every field of the manager's, the scheduler's and the
agent's settings classes with its variable and default, read from the classes; only the words are
written here (a field without words, or words for a field that is gone, stops the generator)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic_settings import BaseSettings

from docs.gen.tables import Stale

MANAGER = {
    "database_url": "`sqlite+aiosqlite:///PATH` or `postgresql+asyncpg://...`; empty: SQLite in the data "
    "directory",
    "db_pool_size": "PostgreSQL connections kept open per manager (as many again open for a burst)",
    "host": "address the manager listens on",
    "port": "port the manager listens on",
    "agent_token": "the token agents authenticate with (`corral up` makes one)",
    "bootstrap_admin_key": "an API key the manager makes sure the `admin` user has at start",
    "rotate_admin_key": "with the bootstrap key: revoke the admin's other keys (`corral up --rotate-key`)",
    "long_poll": "seconds an agent's order poll waits for news (at most a quarter of the lease)",
    "max_request_bytes": "largest request body from a user",
    "max_agent_request_bytes": "largest request body from an agent",
    "log_cap_bytes": "output kept per session; past it the oldest is dropped and counted",
    "stream_queue": "events an `/events/stream` client may fall behind by before it is sent "
    "`event: resync` and closed",
    "webhook_backoff": "seconds before each retry of a failing webhook event, as a JSON list; the "
    "last repeats",
    "webhook_give_up": "seconds an event may keep failing before its webhook is disabled",
    "webhook_lease": "seconds a manager holds a webhook's deliveries; a dead one is replaced after it",
    "webhook_poll": "seconds between a webhook deliverer's looks for new events",
    "stream_recheck": "seconds between checks that an event stream's caller may still read "
    "(a revoked key ends it)",
    "web_session_lifetime": "seconds a web UI sign-in lasts (signing out, or revoking its API key, ends it)",
    "checkpoint_root": "where each retry chain's `$CORRAL_CHECKPOINT_DIR` lives: storage every agent "
    "mounts (empty: under each agent's work dir)",
}

SCHEDULER = {
    "agent_lease": "seconds without contact before an agent is LOST (no more placements there)",
    "fence_timeout": "seconds without a recorded contact after which an agent kills its own kernels",
    "fence_margin": "the manager declares a lost agent's kernels gone at `FENCE_TIMEOUT` plus this",
    "contact_resolution": "an agent's contacts are recorded at most this often",
    "loop_interval": "seconds between scheduling cycles when nothing wakes one earlier",
    "batch_pause": "under load (10 moves a cycle or more), the pause before the next cycle",
    "sweep_interval": "liveness, fences and deadlines are swept at most this often",
    "retry_poll": "how late the retry engine may see attempts another manager ended",
    "retry_event_grace": "ended attempts still undecided this long after their end are decided by "
    "the retry engine's backstop (a decision that failed, a manager that died mid-decision)",
    "deployment_interval": "seconds between runs of the deployment handlers when no health report "
    "or request wakes them earlier",
    "max_tries": "failures of a handler on one session before the coordinator gives up on its step",
    "max_reschedules": "returns to the queue before a session fails with `scheduler_timeout`",
    "pending_timeout": "seconds a session may wait queued (0: for ever); a group may override it",
    "scheduled_timeout": "time limit of SCHEDULED (0: none)",
    "preparing_timeout": "time limit of PREPARING (0: none)",
    "pulling_timeout": "time limit of PULLING (0: none)",
    "prepared_timeout": "time limit of PREPARED (0: none)",
    "creating_timeout": "time limit of CREATING (0: none)",
    "terminating_timeout": "time limit of TERMINATING: then SIGKILL (always bounded: 0 is refused)",
}

AGENT = {
    "manager": "the manager's URL (`--manager`)",
    "token": "the agents' token; prefer this variable to `--token`, which `ps` shows every user",
    "id": "agent id (`--id`); a restarted agent keeps its id",
    "address": "address its peers and gangs reach this node at (`--address`)",
    "resource_group": "the resource group it joins",
    "cpu": "CPU cores it declares (`--cpu`; default: detected)",
    "mem": "memory it declares, e.g. `128G` (`--mem`; default: detected)",
    "gpu": "GPUs it declares (`--gpu`; default: NVML's count)",
    "slots": 'custom resource slots it declares, as JSON, e.g. `{"fpga": 2}`',
    "work_dir": "where kernel directories, logs and checkpoints go (`--work-dir`)",
    "memory_mode": "`auto`, `cgroup2`, `cgroup1` or `watchdog` (`--memory-mode`)",
    "grace": "seconds from SIGTERM to SIGKILL when a kernel is stopped (a group's grace overrides it "
    "for preemption)",
    "images": "runtime environments it offers, a JSON object of name -> spec ([images](images.md);"
    " `--image NAME=JSON` adds one); a session naming another fails with `image_pull_failure`",
    "kernel_user": "started as root: the account kernels of owners without a uid run as (`--kernel-user`)",
    "allow_root_kernels": "started as root: let kernels run as root (`--allow-root-kernels`)",
    "spawn_helper": "`false`: start kernels through the Python fallback instead of the compiled helper",
    "rendezvous_ports": "`LOW-HIGH`: ports the manager may give a gang's rank 0 here (`--rendezvous-ports`)",
    "serve_ports": "`LOW-HIGH`: ports given to deployment replicas here as `$CORRAL_PORT` (`--serve-ports`)",
    "instance": "set by `corral up` for its own agents; leave it unset",
}

MACHINE_DEPENDENT = {("CORRAL_AGENT_", "id"): "the host's name"}


def _default(prefix: str, name: str, field: Any) -> str:
    if (prefix, name) in MACHINE_DEPENDENT:
        return MACHINE_DEPENDENT[(prefix, name)]
    value = field.default
    if value is None or value == "" or value == {}:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int) and value >= 1 << 20 and value % (1 << 20) == 0:
        return f"`{value}` ({value >> 20} MiB)" if value < 1 << 30 else f"`{value}` ({value >> 30} GiB)"
    return f"`{json.dumps(value) if isinstance(value, dict | list) else value}`"


def table(cls: type[BaseSettings], words: Mapping[str, str]) -> str:
    prefix = str(cls.model_config.get("env_prefix", ""))
    fields = cls.model_fields
    if set(fields) != set(words):
        raise Stale(
            f"{cls.__name__}'s fields changed: explain {sorted(set(fields) ^ set(words))} in "
            "docs/gen/settings_table.py"
        )
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in fields.items():
        lines.append(f"| `{prefix}{name.upper()}` | {_default(prefix, name, field)} | {words[name]} |")
    return "\n".join(lines) + "\n"


def manager() -> str:
    from corral.settings import ManagerSettings

    return table(ManagerSettings, MANAGER)


def scheduler() -> str:
    from corral.settings import SchedulerSettings

    return table(SchedulerSettings, SCHEDULER)


def agent() -> str:
    from corral.agent.settings import AgentSettings

    return table(AgentSettings, AGENT)
