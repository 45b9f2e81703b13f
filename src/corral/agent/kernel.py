"""One kernel on this agent: prepare, start under a supervisor, stop, and report how it ended."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import stat
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import structlog

from corral.agent.identity import Account, KernelIdentity, cannot_enter, give, reachable, unreachable_from
from corral.agent.link import SupervisorLink
from corral.agent.shipper import STREAMS, KernelLogs
from corral.domain.error_record import FILE_MAX, FileRecord, parse_file
from corral.domain.exits import cannot_execute, normalise_exit
from corral.domain.status import KernelStatus
from corral.protocol.messages import kernel_key
from corral.protocol.types import scrub

log = structlog.get_logger("corral.agent.kernel")

TERMINATION_LOG_MAX = 4096
WORKER_LIB = Path(__file__).resolve().parent.parent / "workerlib"
Report = dict[str, Any]


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


_CHECKED: dict[tuple[str, str], tuple[float, Any]] = {}
RECHECK = 10.0  # seconds: directories' permissions change rarely; a kernel start is frequent


def _rechecked(kind: str, key: str, check: Callable[[], Any]) -> Any:
    """`check()`, remembered for RECHECK seconds (walking each directory's ancestors on every kernel
    start took a third of a busy agent's time)."""
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
        _rechecked(
            "path",
            value,
            lambda: os.pathsep.join(p for p in value.split(os.pathsep) if p and reachable(Path(p))),
        )
    )


@cache
def _inherited() -> dict[str, str]:
    """The agent's environment, as every kernel inherits it: nothing of Corral's own configuration
    (tokens, keys, data paths).  Read once: the agent's environment is set when it starts (reading
    os.environ decodes every entry again, a fifth of a kernel's start)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_") and k != "XDG_CONFIG_HOME"}


def kernel_env(
    spec: dict[str, Any],
    kernel_id: str,
    session_id: str,
    files: dict[str, Path],
    checkpoint_dir: Path,
    account: Account | None = None,
    worker_lib: Path = WORKER_LIB,
) -> dict[str, str]:
    """`account`: the kernel runs as another account than the agent's."""
    env = dict(_inherited())
    if account is not None:
        # Its own name, a home it can write (not root's), and only the PATH entries it can reach
        # (a root agent's PATH often starts in /root, where `python3` would be "Permission denied").
        home = account.home or str(files["stdout"].parent)
        env.update(HOME=home, USER=account.name, LOGNAME=account.name, PATH=_reachable_path(env.get("PATH")))
    env.update(spec.get("env") or {})
    hosts = spec["hosts"]
    env.update(
        CORRAL_SESSION_ID=session_id,
        CORRAL_KERNEL_ID=kernel_id,
        CORRAL_ATTEMPT=str(spec["attempt"]),
        CORRAL_MAX_ATTEMPTS=str(spec["max_attempts"]),
        CORRAL_CLUSTER_SIZE=str(spec["cluster_size"]),
        CORRAL_CLUSTER_RANK=str(spec["rank"]),
        CORRAL_CLUSTER_ROLE=spec["role"],
        CORRAL_CLUSTER_HOSTS=",".join(hosts),
        MASTER_ADDR=spec["master_addr"],
        MASTER_PORT=str(spec["master_port"] or ""),
        WORLD_SIZE=str(spec["cluster_size"]),
        RANK=str(spec["rank"]),
        CORRAL_WORKER_NAME=spec["worker_name"],
        CORRAL_ERROR_STRATEGY=spec["error_strategy"],
        CORRAL_ERROR_FILE=str(files["error"]),
        TORCHELASTIC_ERROR_FILE=str(files["error"]),
        CORRAL_TERMINATION_LOG=str(files["termination"]),
        CORRAL_CHECKPOINT_DIR=str(checkpoint_dir),
        CORRAL_RESUME_COUNT=str(int(spec.get("resume_count") or 0)),
        # Only the devices allocated to it (none: empty, so a GPU node's devices stay hidden).
        CUDA_VISIBLE_DEVICES=",".join(str(int(d)) for d in spec.get("gpu_devices") or []),
        PYTHONUNBUFFERED="1",
        # `import corral_worker` works in any kernel's python3, with nothing installed.
        PYTHONPATH=os.pathsep.join(p for p in (str(worker_lib), env.get("PYTHONPATH", "")) if p),
    )
    if spec.get("array_id") is not None:
        env.update(CORRAL_ARRAY_ID=str(spec["array_id"]), CORRAL_ARRAY_INDEX=str(int(spec["array_index"])))
    return env


def read_kernel_file(path: Path, max_bytes: int, tail: bool = True) -> bytes:
    """A file the kernel controls, read safely: never a FIFO, device or symlink (which could block the
    agent or never end), and at most `max_bytes` (its end, or its start when `tail` is false)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return b""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return b""
        if tail:
            os.lseek(fd, max(0, info.st_size - max_bytes), os.SEEK_SET)
        return os.read(fd, max_bytes)
    except OSError:
        return b""
    finally:
        os.close(fd)


def _tail_text(path: Path, max_bytes: int) -> str:
    return read_kernel_file(path, max_bytes).decode("utf-8", "replace")


def _error_record(path: Path) -> dict[str, Any] | None:
    """The worker's error file, normalised (both formats, fields capped); {"note"} when it is unusable
    (too big, binary, not JSON, unknown format): the manager then synthesizes the record."""
    raw = read_kernel_file(path, FILE_MAX + 1, tail=False)
    if not raw:
        return None
    if len(raw) > FILE_MAX:
        return {"note": f"the error file is over {FILE_MAX // 1024} KiB: not read"}
    try:
        parsed = parse_file(json.loads(raw))
    except (ValueError, RecursionError):  # anything a kernel wrote: a bad record is no record
        return {"note": "the error file is not valid UTF-8 JSON"}
    return parsed.to_json() if isinstance(parsed, FileRecord) else {"note": parsed}


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
        report: Callable[[Report], None],
        log_cap: int,
        identity: KernelIdentity,
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
        self.files = {
            "stdout": self.dir / "stdout.log",
            "stderr": self.dir / "stderr.log",
            "error": self.dir / "error.json",
            "termination": self.dir / "termination.log",
        }
        self.logs = KernelLogs(kernel_id, generation, {s: self.files[s] for s in STREAMS}, log_cap)
        self.prepared = False
        self.started = False
        self.ended = False
        self.kill_sent = False
        self.fenced = False
        self.pid: int | None = None
        self.master_port: int | None = None
        """Rank 0's rendezvous port, once prepared (picked here or chosen at placement)."""
        self.uid = os.geteuid()
        self.account = identity.default.describe()
        """Who it runs as, as its messages name it."""
        self._done = asyncio.Event()

    def prepare(self, spec: dict[str, Any], images: dict[str, str], quiet: bool = False) -> None:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        image = spec.get("image")
        if image and image not in images:
            self._end(
                KernelStatus.ERROR,
                image_failed=True,
                termination_message=f"unknown image {image!r} on this agent",
            )
            return
        if spec.get("pick_master_port"):
            self.master_port = free_port()
        elif self.rank == 0 and spec.get("master_port"):
            # Chosen at placement from this agent's declared range: it must be free here.
            self.master_port = int(spec["master_port"])
            if not port_is_free(self.master_port):
                self._end(
                    KernelStatus.ERROR,
                    termination_message=f"rendezvous port {self.master_port} is in use on this agent",
                )
                return
        self.prepared = True
        if not quiet:
            self._say(KernelStatus.PREPARED, master_port=self.master_port)

    def _own_files(self, account: Account, checkpoint: Path) -> str | None:
        """Give the kernel's directories and log files to its account; why not, when it cannot be."""
        blocked = _rechecked("dir", str(checkpoint.parent), lambda: unreachable_from(checkpoint.parent))
        if blocked is not None:
            return f"the checkpoint directory {checkpoint} is not reachable by uid {account.uid} ({blocked})"
        try:
            # The files before the directory: once it is the account's, it could put a link or a
            # FIFO where they go (a FIFO would block this loop; O_NONBLOCK fails it instead).
            for name in STREAMS:
                flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                fd = os.open(self.files[name], flags, 0o600)
                os.fchown(fd, account.uid, account.gid)
                os.close(fd)
            give(self.dir, account)
            give(checkpoint, account)
        except OSError as exc:
            return f"cannot give the kernel's files to uid {account.uid}: {exc}"
        return None

    def start(self, spec: dict[str, Any], report_creating: bool = False) -> None:
        """Start it. `report_creating`: it starts without a start order (prepare and start), so the
        agent itself reports PREPARED -> CREATING, before RUNNING, as the manager's order would."""
        # One directory per retry chain: every attempt sees what the previous ones saved.
        given = spec.get("checkpoint_dir")
        checkpoint = Path(given) if given else self.work_dir / "checkpoints" / spec["root_session_id"]
        try:
            checkpoint.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            self.fail(f"cannot create the checkpoint directory {checkpoint}: {exc.strerror}")
            return
        account = self.identity.for_kernel(spec.get("run_as"))
        self.uid = account.uid
        self.account = account.describe()
        workdir = spec.get("workdir")
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
        command = {
            "op": "start",
            "key": self.key,
            "command": spec["command"],
            "user": {"uid": account.uid, "gid": account.gid} if other else None,
            "env": {"CORRAL_WORK_DIR": str(self.dir)}
            | kernel_env(
                spec,
                self.kernel_id,
                self.session_id,
                self.files,
                checkpoint,
                account if other else None,
                # A copy every account can read (the installed package may be in root's home).
                self.work_dir / "lib" if other else WORKER_LIB,
            ),
            "cwd": workdir or str(self.dir),
            "stdout": str(self.files["stdout"]),
            "stderr": str(self.files["stderr"]),
            "mem_limit": int(float(spec["resources"].get("mem", 0))),
            "cpus": float(spec["resources"].get("cpu", 0)),
            "grace": self.grace,
        }
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
        for name, line in (("stderr", f"corral: {why}\n"), ("termination", why)):
            with contextlib.suppress(OSError), open(self.files[name], "a") as f:
                f.write(line)
        self.started = True
        if report_creating:
            self._say(KernelStatus.CREATING)
        self._finish({"ev": "exited", "exit_code": code, "exited_at_ns": time.time_ns(), "start_error": why})

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

    def on_event(self, event: dict[str, Any]) -> None:
        """An event from the supervisor about this kernel."""
        if event["ev"] == "started":
            self.pid = int(event["pid"])
            self._say(KernelStatus.RUNNING, detail={"pid": event["pid"], "uid": self.uid})
        elif event["ev"] == "exited":
            self._finish(event)

    def _finish(self, result: dict[str, Any]) -> None:
        raw = result.get("exit_code")
        info = normalise_exit(raw) if raw is not None else None
        oom = bool(result.get("oom_killed"))
        killed = bool(result.get("killed_by_corral")) or self.kill_sent
        ok = info is not None and info.exit_code == 0 and not oom and not self.fenced
        exit_code = 137 if oom and info is not None else (info.exit_code if info else None)
        message = _tail_text(self.files["termination"], TERMINATION_LOG_MAX).strip()
        tail = ""
        if not ok:
            # Read here, not from the shipped logs: the retry decision must not wait for them.
            tail = _tail_text(self.files["stderr"], 2048) or _tail_text(self.files["stdout"], 2048)
            tail = "\n".join(tail.splitlines()[-80:])
        source = "file" if message else "log_tail"
        said = cannot_execute(tail, self.account) if not message and exit_code in (126, 127) else None
        if said is not None:
            message, source = said, "start_error"
        if not message:
            message = tail
        record = _error_record(self.files["error"])
        self._end(
            KernelStatus.TERMINATED if ok else KernelStatus.ERROR,
            exit_code=exit_code,
            signal=info.signal if info else None,
            oom_killed=oom,
            killed_by_corral=killed and not oom,
            agent_lost=self.fenced,
            exited_at_ns=result.get("exited_at_ns"),
            termination_message=scrub(message[-TERMINATION_LOG_MAX:]) or None,
            error_record=scrub(record) if record is not None else None,
            detail=scrub(
                {
                    **{
                        k: result[k]
                        for k in (
                            "oom_kill_counter",
                            "memory_mode",
                            "cpu_mode",
                            "cpu_seconds",
                            "wall_seconds",
                            "cgroup",
                            "start_error",
                        )
                        if result.get(k) is not None
                    },
                    "uid": self.uid,
                    **({"log_tail": tail} if tail else {}),
                    **({"termination_source": source} if message else {}),
                }
            ),
        )

    def _end(self, status: KernelStatus, **fields: Any) -> None:
        self.ended = True
        self.logs.ended = True  # everything it wrote is in its files now
        self._done.set()
        # Often all of its output has been shipped already: the final report says so (no extra request).
        self.logs.closed = self.logs.all_shipped()
        self._say(status, final=True, output_done=self.logs.closed, **fields)

    def _say(self, status: KernelStatus, **fields: Any) -> None:
        self._report({"kernel_id": self.kernel_id, "generation": self.generation, "status": status, **fields})

    def kill(self, grace: float | None = None) -> None:
        """Graceful stop ordered by the manager (SIGTERM, grace, SIGKILL in the supervisor); `grace`
        is the order's, else the agent's."""
        if self.kill_sent or self.ended:
            return
        self.kill_sent = True
        if not self.started:
            self._end(KernelStatus.CANCELLED, termination_message="stopped before it started")
            return
        self.link.send({"op": "term", "key": self.key, **({"grace": grace} if grace is not None else {})})

    def force_kill(self) -> None:
        """Escalation ordered by the manager: SIGKILL now, no grace."""
        if self.ended:
            return
        if not self.started:
            self.kill()
            return
        self.kill_sent = True
        self.link.send({"op": "kill", "key": self.key})

    def fence(self) -> None:
        """Kill at once: the manager is unreachable (or this kernel is no longer ours)."""
        if self.fenced or self.ended:
            return
        self.fenced = True
        self.kill_sent = True
        if self.started:
            self.link.send({"op": "kill", "key": self.key})
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
