"""A throwaway local Slurm (Debian's `slurm-wlm`) to compare against: slurmctld and slurmd on a
private config under a temp dir, one node declaring the same CPUs as Corral's agents, no munge
(auth/none), stopped afterwards.  `tuned` follows Slurm's high-throughput guide (quiet logs, no
accounting, deferred scheduling on submit, short scheduling intervals)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

TUNED = """
SchedulerParameters=defer,sched_min_interval=0,batch_sched_delay=0,max_rpc_cnt=400
SlurmctldDebug=error
SlurmdDebug=error
MessageTimeout=30
MinJobAge=2
"""


def available() -> bool:
    return all(shutil.which(tool) for tool in ("sbatch", "squeue", "slurmctld", "slurmd"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalSlurm:
    """`with LocalSlurm(cpus) as slurm: slurm.run(n, array)` -> seconds from first submit to empty."""

    def __init__(self, cpus: int, tuned: bool = True) -> None:
        self.cpus = cpus
        self.tuned = tuned
        self.dir = Path(tempfile.mkdtemp(prefix="corral-bench-slurm-"))
        self.conf = self.dir / "slurm.conf"
        self.env = {"SLURM_CONF": str(self.conf), "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> LocalSlurm:
        host = socket.gethostname().split(".")[0]
        for sub in ("state", "spool"):
            (self.dir / sub).mkdir()
        self.conf.write_text(
            f"""ClusterName=corralbench
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
StateSaveLocation={self.dir}/state
SlurmdSpoolDir={self.dir}/spool
SlurmctldPidFile={self.dir}/slurmctld.pid
SlurmdPidFile={self.dir}/slurmd.pid
SlurmctldLogFile={self.dir}/slurmctld.log
SlurmdLogFile={self.dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
MaxJobCount=100000
MaxArraySize=100001
NodeName={host} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=1000 State=UNKNOWN
PartitionName=bench Nodes=ALL Default=YES MaxTime=INFINITE State=UP
{TUNED if self.tuned else ""}"""
        )
        for daemon in (["slurmctld", "-D", "-i"], ["slurmd", "-D"]):
            self._procs.append(
                subprocess.Popen(
                    [*daemon, "-f", str(self.conf)],
                    env=self.env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        deadline = time.monotonic() + 60
        while "idle" not in self._sinfo():
            if time.monotonic() > deadline or any(p.poll() is not None for p in self._procs):
                self.__exit__()
                raise SystemExit(f"local Slurm did not come up; see the logs in {self.dir}")
            time.sleep(0.2)
        return self

    def _sinfo(self) -> str:
        done = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True, text=True)
        return done.stdout

    def _queued(self) -> int:
        done = subprocess.run(
            ["squeue", "-h", "-r", "-o", "%i"], env=self.env, capture_output=True, text=True
        )
        return len(done.stdout.split()) if done.returncode == 0 else -1

    def run(self, n: int, array: bool, concurrency: int = 8) -> float:
        """Submit N one-CPU `true` jobs (serial sbatch from `concurrency` submitters, or one array)
        and return the seconds from the first submit to an empty queue."""
        common = ["sbatch", "-Q", "-n1", "-o", "/dev/null", "-D", str(self.dir)]
        started = time.monotonic()
        if array:
            subprocess.run([*common, f"--array=1-{n}", "--wrap", "true"], env=self.env, check=True)
        else:
            script = f"for i in $(seq $1); do {' '.join(common)} --wrap true || exit 1; done"
            shares = [n // concurrency + (i < n % concurrency) for i in range(concurrency)]
            submitters = [
                subprocess.Popen(["sh", "-c", script, "sh", str(k)], env=self.env) for k in shares if k
            ]
            if any(p.wait() != 0 for p in submitters):
                raise SystemExit("sbatch failed")
        deadline = time.monotonic() + 600 + n
        while self._queued() != 0:
            if time.monotonic() > deadline:
                raise SystemExit(f"Slurm's queue did not empty; see the logs in {self.dir}")
            time.sleep(0.05)
        return time.monotonic() - started

    def __exit__(self, *_exc: object) -> None:
        for p in self._procs:
            if p.poll() is None:
                p.terminate()
        for p in self._procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
