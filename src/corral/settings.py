"""Manager and scheduler settings (pydantic-settings, CORRAL_ prefix)."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Annotated

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from corral.domain.judge import PhaseLimits
from corral.domain.status import SessionStatus


def data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(os.environ.get("CORRAL_HOME") or Path(base) / "corral")


class ManagerSettings(BaseSettings):
    """The API server and its database."""

    model_config = SettingsConfigDict(env_prefix="CORRAL_", extra="ignore")

    database_url: str = ""
    # PostgreSQL connections each manager keeps open (as many again may open for a burst, each
    # closed when it is handed back).  An opened connection costs the server a process, its
    # catalog caches and five plannings of every statement before its plan is cached, so the pool
    # holds enough for a busy manager's concurrent submitters: a smaller one keeps opening and
    # closing connections under steady load, paying all that for each.
    # SQLite ignores it: one writer connection.
    db_pool_size: Annotated[int, Field(ge=1, le=1000)] = 16
    host: str = "127.0.0.1"
    port: int = 8470
    agent_token: str = ""
    bootstrap_admin_key: str = ""
    # With the bootstrap key: revoke every other key of the admin user (`corral up --rotate-key`).
    rotate_admin_key: bool = False
    long_poll: float = 5.0
    max_request_bytes: int = 1 << 20
    max_agent_request_bytes: int = 64 << 20
    # Per session: past it the oldest output is dropped (and counted), the newest kept.
    log_cap_bytes: int = 2 << 30
    # Where each retry chain's $CORRAL_CHECKPOINT_DIR lives: a path every agent can reach (shared
    # storage). Unset: under each agent's work dir. `corral up` sets it (its agents share this host).
    checkpoint_root: str = ""
    # Events an `/events/stream` client may fall behind by before it is told to resync.
    stream_queue: Annotated[int, Field(ge=1, le=1_000_000)] = 1000
    # Seconds between checks that an event stream's caller may still read (a revoked key, an ended
    # web sign-in ends its open streams within this).
    stream_recheck: Annotated[float, Field(ge=0.1, le=3600)] = 15.0
    # Seconds before each retry of a failing webhook event, the last repeated (domain/webhooks).
    webhook_backoff: Annotated[list[Annotated[float, Field(ge=0, le=86_400)]], Field(min_length=1)] = [
        5.0,
        30.0,
        120.0,
        600.0,
        3600.0,
    ]
    # An event failing this long disables its webhook.
    webhook_give_up: Annotated[float, Field(gt=0)] = 86_400.0
    # A webhook's deliverer holds its lease this long, renewed at half: a dead one is replaced then.
    webhook_lease: Annotated[float, Field(ge=1)] = 30.0
    # How often a webhook's deliverer looks for new events.
    webhook_poll: Annotated[float, Field(gt=0, le=60)] = 0.1
    # A web UI sign-in lasts this long (seconds); signing out or revoking its API key ends it sooner.
    web_session_lifetime: Annotated[float, Field(ge=60, le=30 * 86_400)] = 12 * 3600.0

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        path = data_dir() / "corral.db"
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"sqlite+aiosqlite:///{path}"


class SchedulerSettings(BaseSettings):
    """Liveness and per-status limits of the coordinator (seconds; 0 disables a timeout, except
    that TERMINATING is always bounded: see README "Nothing hangs")."""

    model_config = SettingsConfigDict(env_prefix="CORRAL_", extra="ignore")

    agent_lease: float = 15.0
    fence_timeout: float = 30.0
    # The manager declares a silent agent's kernels gone at fence_timeout + fence_margin after the
    # last request it received; the agent has killed them at fence_timeout after sending it.
    fence_margin: float = 5.0
    # Contacts are written at most this often per agent; replies say which were (see agent_protocol).
    contact_resolution: float = 0.5
    loop_interval: float = 1.0
    # Under load (a cycle moved at least BATCH_MOVES sessions) the next cycle waits this long, so
    # that it takes a batch: a cycle's transactions cost nearly as much for one session as for
    # thirty, and the agents' reports and polls are served in between.  A lone session on an idle
    # cluster never waits for it.
    batch_pause: Annotated[float, Field(ge=0, le=1)] = 0.01
    # Liveness, fences and deadlines are swept at most this often (every cycle when 0).
    sweep_interval: Annotated[float, Field(ge=0, le=5)] = 0.25
    # The retry engine is woken by its own manager's cycles; this bounds how late it sees attempts
    # ended through another manager.
    retry_poll: Annotated[float, Field(gt=0)] = 1.0
    # The retry engine's stored cursor passes only events older than this (a transaction may
    # commit an earlier event id later); an ended attempt undecided past it is looked for too.
    retry_event_grace: Annotated[float, Field(gt=0)] = 10.0
    # The deployment handlers run when a replica's health report or a request wakes them, else
    # this often (a route's staleness and drains are judged in seconds).
    deployment_interval: Annotated[float, Field(gt=0, le=60)] = 1.0
    max_tries: int = 3
    max_reschedules: int = 3
    pending_timeout: float = 0.0
    scheduled_timeout: float = 300.0
    preparing_timeout: float = 600.0
    pulling_timeout: float = 1800.0
    prepared_timeout: float = 300.0
    creating_timeout: float = 300.0
    terminating_timeout: Annotated[float, Field(gt=0)] = 120.0  # always bounded: 0 is refused

    def limits(self) -> PhaseLimits:
        def t(seconds: float) -> timedelta | None:
            return timedelta(seconds=seconds) if seconds > 0 else None

        return PhaseLimits(
            timeouts={
                SessionStatus.PENDING: t(self.pending_timeout),
                SessionStatus.SCHEDULED: t(self.scheduled_timeout),
                SessionStatus.PREPARING: t(self.preparing_timeout),
                SessionStatus.PULLING: t(self.pulling_timeout),
                SessionStatus.PREPARED: t(self.prepared_timeout),
                SessionStatus.CREATING: t(self.creating_timeout),
                SessionStatus.TERMINATING: t(self.terminating_timeout),
            },
            max_tries=self.max_tries,
            max_reschedules=self.max_reschedules,
            declare_gone_after=timedelta(seconds=self.fence_timeout + self.fence_margin),
        )
