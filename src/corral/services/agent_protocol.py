"""The manager's side of the agent protocol: registration, orders, reports, heartbeats."""

from __future__ import annotations

import hashlib
import json
import time
from datetime import timedelta
from typing import Any

from corral.clock import utcnow
from corral.domain.error_record import worker_name
from corral.domain.records import KernelRecord, KernelReport, OrderedKernel, SessionRecord
from corral.domain.rendezvous import start_at_once
from corral.domain.resources import ResourceError, ResourceSlots
from corral.domain.route_health import Health
from corral.domain.spec import SessionType
from corral.domain.status import TERMINAL_KERNEL, KernelStatus
from corral.protocol.logs import LogShipment
from corral.protocol.messages import kernel_key
from corral.protocol.orders import KernelOrder, KernelSpec, RunAs, ServeSpec
from corral.protocol.replicas import ReplicaState
from corral.services.errors import Conflict, Fenced, InvalidInput
from corral.settings import SchedulerSettings
from corral.store import agents, deployments, kernels, logs, order_sources, routes, sessions
from corral.store.db import reading, transaction
from corral.store.unit import Engine, Tx
from corral.wakeup import Wakeup

# Orders carry the full spec only where the agent must act on it.
_SPEC_STATUSES = frozenset({KernelStatus.PREPARING, KernelStatus.PULLING, KernelStatus.CREATING})


class AgentProtocol:
    """Stateless; safe to run in every manager."""

    def __init__(
        self,
        engine: Engine,
        cfg: SchedulerSettings,
        wakeup: Wakeup,
        log_cap: int,
        checkpoint_root: str = "",
        reader: Engine | None = None,
    ) -> None:
        self._log_cap = log_cap
        self._checkpoint_root = checkpoint_root
        self._written: dict[tuple[str, int], float] = {}
        self._resolution = min(cfg.contact_resolution, cfg.agent_lease / 10)
        self._engine = engine
        self._reader = reader or engine  # the long poll's reads (see store.db.make_reader)
        self._cfg = cfg
        self._wakeup = wakeup

    async def register(
        self,
        agent_id: str,
        hostname: str,
        address: str,
        resource_group: str,
        capacity: dict[str, Any],
        info: dict[str, Any],
        schedulable: bool = True,
        unschedulable_reason: str | None = None,
    ) -> int:
        try:
            slots = ResourceSlots.parse(capacity)
        except ResourceError as exc:
            raise InvalidInput(f"capacity.{exc.field}", str(exc)) from exc
        async with transaction(self._engine) as conn:
            twin = await agents.live_incarnation(
                conn,
                agent_id,
                str(info.get("instance", "")),
                timedelta(seconds=self._cfg.agent_lease),
                timedelta(seconds=self._cfg.fence_timeout + self._cfg.fence_margin),
                utcnow(),
            )
            if twin is not None:
                raise Conflict(
                    f"agent id {agent_id!r} is in use by another live agent (last heartbeat"
                    f" {twin:%H:%M:%S} UTC): give this one another --id, or stop the other",
                    {"field": "agent_id"},
                )
            await agents.ensure_resource_group(conn, resource_group, utcnow())
            epoch = await agents.register(
                conn,
                agent_id,
                hostname=hostname,
                address=address,
                resource_group=resource_group,
                capacity=slots,
                # Typed fields, not whatever the agent put in its info: placement reads this flag.
                info={**info, **agents.standing(schedulable, unschedulable_reason)},
                now=utcnow(),
            )
        self._wakeup.scheduler()
        return epoch

    # Fencing: the manager declares an agent's kernels gone at fence_timeout + margin after the
    # last contact it *recorded*.  Not every request is written (that would cost a write per long
    # poll); instead each reply says whether its request was recorded, and the agent counts its own
    # fence only from the send time of recorded requests, which is never later than the record.
    def _due(self, agent_id: str, epoch: int) -> bool:
        return time.monotonic() - self._written.get((agent_id, epoch), -1e9) >= self._resolution

    def _mark(self, agent_id: str, epoch: int) -> None:
        if len(self._written) > 100_000:
            self._written.clear()
        self._written[(agent_id, epoch)] = time.monotonic()

    async def _contact(self, conn: Tx, agent_id: str, epoch: int) -> bool:
        """Refuse a fenced epoch; write the contact if due.  True when written (the caller marks it
        once its transaction has committed)."""
        if self._due(agent_id, epoch):
            if not await agents.heartbeat(conn, agent_id, epoch, utcnow()):
                raise Fenced(f"agent {agent_id} epoch {epoch} is fenced; register again")
            return True
        if await agents.current_epoch(conn, agent_id) != epoch:
            raise Fenced(f"agent {agent_id} epoch {epoch} is fenced; register again")
        return False

    async def _beat(self, agent_id: str, epoch: int) -> bool:
        if not self._due(agent_id, epoch):
            return False  # the caller checks the epoch itself
        async with transaction(self._engine) as conn:
            recorded = await self._contact(conn, agent_id, epoch)
        if recorded:
            self._mark(agent_id, epoch)
        return recorded

    async def health(
        self,
        agent_id: str,
        epoch: int,
        schedulable: bool,
        reason: str | None,
        images: dict[str, Any] | None = None,
    ) -> None:
        """The agent can start kernels again, or no longer can (why), or its images are ready now:
        placement reads it next cycle."""
        async with transaction(self._engine) as conn:
            if not await agents.set_standing(conn, agent_id, epoch, schedulable, reason, images):
                raise Fenced(f"agent {agent_id} epoch {epoch} is fenced; register again")
        if schedulable:
            self._wakeup.scheduler()  # room where there was none: the queue may move

    async def leave(self, agent_id: str, epoch: int) -> None:
        async with transaction(self._engine) as conn:
            if await agents.current_epoch(conn, agent_id) != epoch:
                raise Fenced(f"agent {agent_id} epoch {epoch} is fenced")
            await agents.leave(conn, agent_id, utcnow())
        self._wakeup.scheduler()

    async def orders(
        self, agent_id: str, epoch: int, seen: str, wait: float, started: frozenset[str] = frozenset()
    ) -> tuple[str, list[KernelOrder], bool]:
        """The agent's orders, once they differ from `seen` (or the wait is over).  Kernels the
        agent has `started` (`<kernel id>.<generation>`) get no spec: it reads none for them, and
        building one reads the session (a session per kernel, for every poll until its next
        status is written)."""
        recorded = await self._beat(agent_id, epoch)
        # Never hold a poll longer than the agent's heartbeat interval, whatever it asked for.
        deadline = time.monotonic() + min(wait, heartbeat_interval(self._cfg))
        woken = False
        while True:
            version = self._wakeup.orders_version
            try:
                async with reading(self._reader) as conn:
                    mine = await kernels.orders_for(conn, agent_id, epoch)
                    if mine is None:
                        raise Fenced(f"agent {agent_id} epoch {epoch} is fenced; register again")
                    remaining = deadline - time.monotonic()
                    # The orders' fingerprint is the kernels' alone: a poll woken by another agent's
                    # orders (most wake-ups) reads no session and builds no spec before waiting again.
                    fingerprint = _fingerprint(mine)
                    if fingerprint != seen or remaining <= 0:
                        found = await _orders(conn, mine, self._checkpoint_root, started)
                        return fingerprint, found, recorded
            finally:
                if woken:
                    self._wakeup.orders_read()
                    woken = False
            # Another manager may run the loop: re-check at least every second.
            woken = await self._wakeup.wait_orders(version, min(remaining, 1.0))

    async def ship_logs(
        self, agent_id: str, epoch: int, shipment: LogShipment, data: bytes
    ) -> tuple[bool, bool]:
        """Store a piece of a kernel's output.  Returns (stored, contact recorded); not stored when
        the kernel is not (or no longer) this agent's, which tells the agent to stop shipping it."""
        now = utcnow()
        stored = True
        async with transaction(self._engine) as conn:
            recorded = await self._contact(conn, agent_id, epoch)
            found = await logs.target(conn, agent_id, shipment.kernel_id)
            if found is None or found.generation != shipment.generation:
                stored = False
            else:
                # One writer per session at a time: chunk ids then commit in order (a reader's cursor
                # never passes a chunk that commits later) and the cap counts each drop once.
                await sessions.lock(conn, found.session_id)
                at = (shipment.kernel_id, shipment.stream, shipment.offset)
                await logs.append(conn, found.session_id, *at, data, now, shipment.generation)
                await logs.enforce_cap(conn, found.session_id, self._log_cap)
                if shipment.eof:
                    await logs.mark_done(conn, shipment.kernel_id)
        if recorded:
            self._mark(agent_id, epoch)
        return stored, recorded

    async def report(
        self, agent_id: str, epoch: int, reports: list[KernelReport]
    ) -> tuple[int, list[str], bool]:
        now = utcnow()
        refused, recorded = await kernels.apply_report(
            self._engine, agent_id, reports, now, contact=lambda conn: self._contact(conn, agent_id, epoch)
        )
        if recorded:
            self._mark(agent_id, epoch)
        if reports:
            # Only an ending frees capacity; progress alone leaves placement as it was.
            self._wakeup.scheduler(room=any(r.status in TERMINAL_KERNEL for r in reports))
        return len(reports) - len(refused), refused, recorded

    async def replicas(self, agent_id: str, epoch: int, states: list[ReplicaState]) -> int:
        """Ports and health of the deployment replicas the agent runs, recorded on their routes
        (only for sessions with a kernel on this agent); the deployment handlers judge them."""
        now = utcnow()
        async with transaction(self._engine) as conn:
            if await agents.current_epoch(conn, agent_id) != epoch:
                raise Fenced(f"agent {agent_id} epoch {epoch} is fenced; register again")
            address = await agents.address_of(conn, agent_id)
            ids = [s.session_id for s in states]
            mine = {sid for sid, _, agent, _ in await kernels.sessions_on(conn, [agent_id]) if sid in ids}
            recorded = 0
            for st in states:
                if st.session_id not in mine:
                    continue
                health = Health(st.ok_in_a_row, st.failed_in_a_row, now, st.detail) if st.probed else None
                started = now if st.running else None
                recorded += await routes.report(conn, st.session_id, now, (address, st.port), started, health)
        if recorded:
            self._wakeup.deployments()
        return recorded


async def _serve_specs(conn: Tx, sessions: list[SessionRecord]) -> dict[str, ServeSpec]:
    """The health check of each of these sessions that is a deployment's replica."""
    ids = [s.id for s in sessions if s.spec.type is SessionType.INFERENCE]
    found = await routes.by_sessions(conn, ids)
    revisions = await deployments.revisions(conn, {r.deployment_id for r in found.values()})
    out = {}
    for sid, route in found.items():
        rev = revisions.get((route.deployment_id, route.revision))
        if rev is not None:
            out[sid] = ServeSpec.model_validate(rev.health.to_json())
    return out


def _fingerprint(mine: list[OrderedKernel]) -> str:
    """What an agent's orders say, in short: it polls again with it and is answered when it changes."""
    said = [(k.id, k.generation, str(k.status), k.kill_requested, k.kill_forced) for k in mine]
    return hashlib.sha1(json.dumps(said).encode()).hexdigest()


async def _orders(
    conn: Tx, mine: list[OrderedKernel], checkpoint_root: str, started: frozenset[str]
) -> list[KernelOrder]:
    """The orders for an agent's kernels `mine` (those it should hold a process or preparation for)."""
    if not mine:
        return []
    with_spec = [
        k for k in mine if k.status in _SPEC_STATUSES and kernel_key(k.id, k.generation) not in started
    ]
    src = await order_sources.read(conn, [k.session_id for k in with_spec])
    # A spec is built from the kernel's whole row, read with its session.
    rows = {p.id: p for s in src.sessions.values() for p in s.kernels}
    spec_of = {k.id: rows.get(k.id) for k in with_spec}
    serve = await _serve_specs(conn, list(src.sessions.values()))
    out = []
    for k in mine:
        own = spec_of.get(k.id)
        out.append(
            KernelOrder(
                kernel_id=k.id,
                session_id=k.session_id,
                rank=k.rank,
                generation=k.generation,
                status=k.status,
                kill=k.kill_requested,
                force=k.kill_forced,
                grace=k.kill_grace,
                # A replica's rank 0 serves (and is probed); a gang's other ranks are its workers.
                spec=_spec(
                    src.sessions[k.session_id],
                    own,
                    src,
                    checkpoint_root,
                    serve.get(k.session_id) if k.rank == 0 else None,
                )
                if own
                else None,
            )
        )
    return out


def _spec(
    s: SessionRecord,
    k: KernelRecord,
    src: order_sources.OrderSources,
    checkpoint_root: str,
    serve: ServeSpec | None = None,
) -> KernelSpec:
    hosts = tuple(src.addresses.get(p.agent_id or "", "127.0.0.1") for p in s.kernels)
    master = s.kernels[0]
    run_as = src.run_as.get(s.owner)
    return KernelSpec(
        session_name=s.name,
        command=tuple(s.spec.command),
        env=dict(s.spec.env),
        image=s.spec.image,
        workdir=s.spec.workdir,
        resources=k.resources.to_json(),
        cluster_size=s.cluster_size,
        rank=k.rank,
        role=k.role,
        hosts=hosts,
        master_addr=hosts[0],
        master_port=master.master_port,
        # Rank 0's agent picks a free port unless one was chosen at placement.
        pick_master_port=k.rank == 0 and master.master_port is None,
        # "Prepare and start" (one round trip, not two) when the rendezvous is known now; else the
        # kernel waits, prepared, for the start order that carries rank 0's port.
        start_at_once=start_at_once([p.agent_id for p in s.kernels], master.master_port),
        attempt=s.attempt,
        resume_count=s.resume_count,
        array_id=s.spec.array_id,
        array_index=s.spec.array_index,
        max_attempts=s.max_attempts,
        checkpoint_dir=f"{checkpoint_root}/{s.root_session_id}" if checkpoint_root else None,
        error_strategy=str(s.spec.error_strategy),
        gpu_devices=tuple(k.devices or ()),
        worker_name=worker_name(k.rank),
        root_session_id=s.root_session_id,
        timeout_grace=10.0,
        # The owner's uid/gid on agents started as root (else the agent's default account).
        run_as=RunAs.model_validate(run_as) if run_as else None,
        serve=serve,
    )


def heartbeat_interval(cfg: SchedulerSettings) -> float:
    return max(0.2, cfg.agent_lease / 4)
