"""One kernel on this agent: prepare, start under a supervisor, stop, and report how it ended."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
from pydantic import ValidationError

from corral.agent import commands
from corral.agent.capacity import free_port, port_is_free
from corral.agent.events import Exited, Started
from corral.agent.identity import Account, KernelIdentity, cannot_enter, give, unreachable_from
from corral.agent.image_build import BuildFailed, Images
from corral.agent.images import Environment
from corral.agent.kernel_env import WORKER_LIB, kernel_env, rechecked
from corral.agent.kernel_files import TERMINATION_LOG_MAX, KernelFiles, error_record, tail_text
from corral.agent.link import SupervisorLink
from corral.agent.shipper import KernelLogs
from corral.domain.exits import cannot_execute, normalise_exit
from corral.domain.status import KernelStatus
from corral.protocol.messages import kernel_key
from corral.protocol.orders import KernelSpec
from corral.protocol.reports import DETAILS, KernelReportIn
from corral.protocol.types import scrub

log = structlog.get_logger("corral.agent.kernel")

Reporter = Callable[[KernelReportIn, bool], None]
"""Queues a report for the manager; true: the kernel's final one (the agent then forgets it)."""


class KernelRunner:
    """Lives from the prepare order to the final report; `report` queues a report for the manager."""

    def __init__(
        self,
        kernel_id: str,
        generation: int,
        session_id: str,
        rank: int,
        work_dir: Path,
        link: SupervisorLink,
        grace: float,
        report: Reporter,
        log_cap: int,
        identity: KernelIdentity,
        ship: Callable[[str, KernelLogs], None],
    ) -> None:
        self.kernel_id = kernel_id
        self.identity = identity
        self.generation = generation
        self.key = kernel_key(kernel_id, generation)
        self.session_id = session_id
        self.rank = rank
        self.dir = work_dir / "kernels" / self.key
        self.work_dir = work_dir
        self.link = link
        self.grace = grace
        self._report = report
        self._ship = ship
        """Hands its output to the log shipper (once it starts, or its image failed to build)."""
        self.files = KernelFiles.under(self.dir)
        self.logs = KernelLogs(kernel_id, generation, self.files.streams(), log_cap)
        self.prepared = False
        self.started = False
        self.ended = False
        self.kill_sent = False
        self.fenced = False
        self.pid: int | None = None
        self.master_port: int | None = None
        """Rank 0's rendezvous port, once prepared (picked here or chosen at placement)."""
        self.environment: Environment | None = None
        """Its image's environment (None: the agent's own)."""
        self.pulling: asyncio.Task[None] | None = None
        """Its image's build, while it waits for it."""
        self.forgotten = False
        self.uid = os.geteuid()
        self.account = identity.default.describe()
        """Who it runs as, as its messages name it."""
        self._done = asyncio.Event()

    def prepare(
        self, spec: KernelSpec, images: Images, quiet: bool = False, then: Callable[[], None] | None = None
    ) -> None:
        """Make it ready to start, then `then()`. An image that must be built first is built in
        the background (the kernel says PULLING; `quiet`: it says nothing, as a start order's)."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        image = spec.image
        if image:
            if image not in images.specs:
                self._end(
                    KernelStatus.ERROR,
                    image_failed=True,
                    termination_message=f"image {image!r} is not offered by this agent",
                )
                return
            self.environment = images.ready(image)
            if self.environment is None:
                if not quiet:
                    self._say(KernelStatus.PULLING)
                self.pulling = asyncio.create_task(self._pull(spec, images, image, quiet, then))
                return
        self._prepared(spec, quiet, then)

    async def _pull(
        self, spec: KernelSpec, images: Images, image: str, quiet: bool, then: Callable[[], None] | None
    ) -> None:
        try:
            self.environment = await images.prepare(image, self.files.prepare)
        except Exception as exc:  # a build that fails fails this kernel, never the agent
            if not self.ended and not self.forgotten:
                why = str(exc) if isinstance(exc, BuildFailed) else f"building image {image!r}: {exc!r}"
                self._ship(self.key, self.logs)  # its preparation log: pip's whole output
                self._end(
                    KernelStatus.ERROR, image_failed=True, termination_message=why[-TERMINATION_LOG_MAX:]
                )
            return
        finally:
            self.pulling = None
        if not self.ended and not self.forgotten:
            self._prepared(spec, quiet, then)

    def _prepared(self, spec: KernelSpec, quiet: bool, then: Callable[[], None] | None) -> None:
        if spec.pick_master_port:
            self.master_port = free_port()
        elif self.rank == 0 and spec.master_port:
            # Chosen at placement from this agent's declared range: it must be free here.
            self.master_port = spec.master_port
            if not port_is_free(self.master_port):
                self._end(
                    KernelStatus.ERROR,
                    termination_message=f"rendezvous port {self.master_port} is in use on this agent",
                )
                return
        self.prepared = True
        if not quiet:
            self._say(KernelStatus.PREPARED, master_port=self.master_port)
        if then is not None:
            then()

    def forget(self) -> None:
        """No longer ordered before it started: an image build it waits for finishes for others,
        and nothing more is said or started for it."""
        self.forgotten = True

    def _own_files(self, account: Account, checkpoint: Path) -> str | None:
        """Give the kernel's directories and log files to its account; why not, when it cannot be."""
        blocked = rechecked("dir", str(checkpoint.parent), lambda: unreachable_from(checkpoint.parent))
        if blocked is not None:
            return f"the checkpoint directory {checkpoint} is not reachable by uid {account.uid} ({blocked})"
        try:
            # The files before the directory: once it is the account's, it could put a link or a
            # FIFO where they go (a FIFO would block this loop; O_NONBLOCK fails it instead).
            for path in (self.files.stdout, self.files.stderr):
                flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                fd = os.open(path, flags, 0o600)
                os.fchown(fd, account.uid, account.gid)
                os.close(fd)
            give(self.dir, account)
            give(checkpoint, account)
        except OSError as exc:
            return f"cannot give the kernel's files to uid {account.uid}: {exc}"
        return None

    def start(self, spec: KernelSpec, report_creating: bool = False) -> None:
        """Start it. `report_creating`: it starts without a start order (prepare and start), so the
        agent itself reports PREPARED -> CREATING, before RUNNING, as the manager's order would."""
        self._ship(self.key, self.logs)
        # One directory per retry chain: every attempt sees what the previous ones saved.
        given = spec.checkpoint_dir
        checkpoint = Path(given) if given else self.work_dir / "checkpoints" / spec.root_session_id
        try:
            checkpoint.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            self.fail(f"cannot create the checkpoint directory {checkpoint}: {exc.strerror}")
            return
        account = self.identity.for_kernel(spec.run_as)
        self.uid = account.uid
        self.account = account.describe()
        workdir = spec.workdir
        if workdir:
            why = cannot_enter(Path(workdir), account)
            if why is not None:
                # As a shell's cd would fail: exit 126 before any exec, in the kernel's own words.
                self._refused(126, f"cannot enter {workdir} as {self.account}: {why}", report_creating)
                return
        other = account.uid != os.geteuid()
        if other:
            why = self._own_files(account, checkpoint)
            if why is not None:
                self.fail(why)
                return
        command = commands.Start(
            key=self.key,
            command=tuple(spec.command),
            user=commands.Account(uid=account.uid, gid=account.gid) if other else None,
            env={"CORRAL_WORK_DIR": str(self.dir)}
            | kernel_env(
                spec,
                self.kernel_id,
                self.session_id,
                self.files,
                checkpoint,
                account if other else None,
                # A copy every account can read (the installed package may be in root's home).
                self.work_dir / "lib" if other else WORKER_LIB,
                self.environment,
            ),
            cwd=workdir or str(self.dir),
            stdout=str(self.files.stdout),
            stderr=str(self.files.stderr),
            mem_limit=spec.mem_limit(),
            cpus=spec.cpus(),
            grace=self.grace,
        )
        self.started = True
        if report_creating:
            self._say(KernelStatus.CREATING)
        sent = self.link.send(command)
        if not sent:
            self._end(
                KernelStatus.ERROR,
                agent_lost=True,
                termination_message="the agent's supervisor is not running",
            )

    def _refused(self, code: int, why: str, report_creating: bool) -> None:
        """It ends as a process that exited `code` at once, saying `why` in its log and as its
        termination message (nothing was executed)."""
        for path, line in ((self.files.stderr, f"corral: {why}\n"), (self.files.termination, why)):
            with contextlib.suppress(OSError), open(path, "a") as f:
                f.write(line)
        self.started = True
        if report_creating:
            self._say(KernelStatus.CREATING)
        self._finish(Exited(key=self.key, exit_code=code, exited_at_ns=time.time_ns(), start_error=why))

    @property
    def starting(self) -> bool:
        """Its start went to the supervisor, which has not yet said it started (or failed)."""
        return self.started and self.pid is None and not self.ended

    def fail(self, why: str) -> None:
        """This kernel cannot be run as ordered: it ends ERROR with the reason, nothing else does."""
        if self.started and not self.fenced:
            self.fence()  # whatever was started goes; the supervisor's exit event ends it
            return
        self._end(KernelStatus.ERROR, termination_message=why)

    def on_event(self, event: Started | Exited) -> None:
        """An event from the supervisor about this kernel."""
        if isinstance(event, Started):
            self.pid = event.pid
            self._say(KernelStatus.RUNNING, detail={"pid": event.pid, "uid": self.uid})
        else:
            self._finish(event)

    def _finish(self, result: Exited) -> None:
        raw = result.exit_code
        info = normalise_exit(raw) if raw is not None else None
        oom = result.oom_killed
        killed = result.killed_by_corral or self.kill_sent
        ok = info is not None and info.exit_code == 0 and not oom and not self.fenced
        exit_code = 137 if oom and info is not None else (info.exit_code if info else None)
        message = tail_text(self.files.termination, TERMINATION_LOG_MAX).strip()
        tail = ""
        if not ok:
            # Read here, not from the shipped logs: the retry decision must not wait for them.
            tail = tail_text(self.files.stderr, 2048) or tail_text(self.files.stdout, 2048)
            tail = "\n".join(tail.splitlines()[-80:])
        source = "file" if message else "log_tail"
        said = cannot_execute(tail, self.account) if not message and exit_code in (126, 127) else None
        if said is not None:
            message, source = said, "start_error"
        if not message:
            message = tail
        record = error_record(self.files.error)
        self._end(
            KernelStatus.TERMINATED if ok else KernelStatus.ERROR,
            exit_code=exit_code,
            signal=info.signal if info else None,
            oom_killed=oom,
            killed_by_corral=killed and not oom,
            agent_lost=self.fenced,
            exited_at_ns=result.exited_at_ns,
            termination_message=scrub(message[-TERMINATION_LOG_MAX:]) or None,
            error_record=scrub(record) if record is not None else None,
            detail=scrub(
                {
                    **result.detail(),
                    "uid": self.uid,
                    **({"log_tail": tail} if tail else {}),
                    **({"termination_source": source} if message else {}),
                }
            ),
        )

    def _end(self, status: KernelStatus, **fields: Any) -> None:
        """It ended: its final report, with `fields` (KernelReportIn's)."""
        self.ended = True
        self.logs.ended = True  # everything it wrote is in its files now
        self._done.set()
        # Often all of its output has been shipped already: the final report says so (no extra request).
        self.logs.closed = self.logs.all_shipped()
        self._say(status, final=True, output_done=self.logs.closed, **fields)

    def _say(self, status: KernelStatus, final: bool = False, **fields: Any) -> None:
        """Queue a report of `status` with `fields` (KernelReportIn's)."""
        try:
            report = KernelReportIn(
                kernel_id=self.kernel_id, generation=self.generation, status=status, **fields
            )
        except ValidationError as exc:
            # Its details cannot be sent (the manager would refuse them too): its transition still
            # is, or the kernel would never end for the manager.
            log.error(
                "a kernel report's details are unusable: sent without them", kernel=self.key, error=str(exc)
            )
            essential = {k: v for k, v in fields.items() if k not in DETAILS}
            report = KernelReportIn(
                kernel_id=self.kernel_id, generation=self.generation, status=status, **essential
            )
        self._report(report, final)

    def kill(self, grace: float | None = None) -> None:
        """Graceful stop ordered by the manager (SIGTERM, grace, SIGKILL in the supervisor); `grace`
        is the order's, else the agent's."""
        if self.kill_sent or self.ended:
            return
        self.kill_sent = True
        if not self.started:
            self._end(KernelStatus.CANCELLED, termination_message="stopped before it started")
            return
        self.link.send(commands.Term(key=self.key, grace=grace))

    def force_kill(self) -> None:
        """Escalation ordered by the manager: SIGKILL now, no grace."""
        if self.ended:
            return
        if not self.started:
            self.kill()
            return
        self.kill_sent = True
        self.link.send(commands.Kill(key=self.key))

    def fence(self) -> None:
        """Kill at once: the manager is unreachable (or this kernel is no longer ours)."""
        if self.fenced or self.ended:
            return
        self.fenced = True
        self.kill_sent = True
        if self.started:
            self.link.send(commands.Kill(key=self.key))
        else:
            self.ended = True  # nothing ran; the manager learns of it through the fence, not from us
            self._done.set()

    async def supervisor_lost(self) -> None:
        """Our supervisor died: end the kernel, once what is left of it is killed and confirmed gone.
        With cgroups the agent has done that for every kernel cgroup (_empty_kernel_cgroups);
        without, it is done here for the kernel's process group."""
        if self.ended:
            return
        deadline = time.monotonic() + 10
        while self.pid is not None and not self.link.mode.any:
            try:
                os.killpg(self.pid, signal.SIGKILL)  # started with setsid: its group is its tree
            except (ProcessLookupError, PermissionError):
                break
            if time.monotonic() > deadline:
                log.error("kernel processes survived their supervisor", kernel=self.kernel_id, pid=self.pid)
                break
            await asyncio.sleep(0.02)
        self._end(
            KernelStatus.ERROR,
            agent_lost=True,
            killed_by_corral=True,
            exited_at_ns=time.time_ns(),
            termination_message="the agent's supervisor died; Corral killed the kernel",
        )

    async def wait(self) -> None:
        await self._done.wait()
