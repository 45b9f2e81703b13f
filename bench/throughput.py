"""Throughput: an embedded Corral (manager + 2 agents declaring 32 CPUs each) runs N 1-CPU `true`
sessions; prints sessions/s from the first submit to the last terminal status.

    .venv/bin/python bench/throughput.py --n 1000 [--array] [--postgres] [--compare-slurm] [--rounds 3]

With --array the N sessions are one job array (one request, one transaction) instead of N requests.
With --compare-slurm the same N jobs then run on a local Slurm (Debian's slurm-wlm: slurmctld and
slurmd started on a private config, one node with the same 64 CPUs, tuned for throughput unless
--slurm-untuned; serial sbatch from the same number of submitters, or one --array job) and both
figures are printed with their ratio. With --rounds N the whole run (and Slurm's) is made N times,
alternating, on a fresh installation each time: every round is printed, then the medians (this
machine's speed drifts by 10-20% from one minute to the next, Slurm's far less). With
--compare-postgres each round runs on SQLite and then on a throwaway PostgreSQL cluster, and
prints the ratio of the two, with how much the agents' CPU per session (the same work on either
backend) moved from one run to the other: the machine's speed moving in between, and the ratio at
the first run's speed (the second's throughput times that move: on a machine the runs keep busy,
sessions/s is inversely the CPU a session costs, and the same work's cost is the speed). Every run also
prints the CPU it cost per session (the machine's, the manager's, the agents' with everything they
start, a local PostgreSQL server's) and how busy the cores were: on a machine a run keeps busy,
sessions/s is that CPU divided by a session's cost.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import slurm  # noqa: E402
from bench.common import add_database_options, database, machine, scratch, server_pid  # noqa: E402
from bench.cpu import Meter, Reading, per_session  # noqa: E402
from tests.support.postgres import free_port  # noqa: E402

TERMINAL = ("TERMINATED", "CANCELLED", "ERROR")
STALL = 120.0
"""Seconds without a session ending after which a run is called stuck."""
WARMUP = "warmup"
"""The warm-up sessions' name: left out of the figures."""


def start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def submit_array(http: httpx.Client, n: int, name: str = "bench") -> float:
    first = time.monotonic()
    body = {"command": ["true"], "resources": {"cpu": 1}, "name": name, "array": f"0-{n - 1}"}
    resp = http.post("/api/v1/sessions", json=body)
    resp.raise_for_status()
    return time.monotonic() - first


async def submit_all(url: str, key: str, n: int, concurrency: int, name: str = "bench") -> float:
    headers = {"Authorization": f"Bearer {key}"}
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http:

        async def worker() -> None:
            while not queue.empty():
                i = queue.get_nowait()
                body = {"command": ["true"], "resources": {"cpu": 1}, "name": f"{name}-{i}"}
                resp = await http.post("/api/v1/sessions", json=body)
                resp.raise_for_status()

        first = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.monotonic() - first


def tally(http: httpx.Client) -> tuple[int, int]:
    """Sessions ended, and sessions in all."""
    counts = http.get("/api/v1/sessions/counts").json()
    return sum(counts.get(s, 0) for s in TERMINAL), sum(counts.values())


def server_span(http: httpx.Client) -> tuple[float, int]:
    """Seconds from the first created_at to the last terminated_at of the measured sessions (not
    the warm-up's), and how many succeeded."""
    created, ended, ok, offset = [], [], 0, 0
    while True:
        page = http.get("/api/v1/sessions", params={"limit": 1000, "offset": offset}).json()
        if not page:
            break
        for s in page:
            if s["name"].startswith(WARMUP):
                continue
            created.append(datetime.fromisoformat(s["created_at"]))
            ended.append(datetime.fromisoformat(s["terminated_at"]))
            ok += s["result"] == "success"
        offset += len(page)
    return (max(ended) - min(created)).total_seconds(), ok


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=1000, help="sessions to run")
    parser.add_argument("--cpus", type=int, default=32, help="CPUs each of the 2 agents declares")
    parser.add_argument("--concurrency", type=int, default=8, help="parallel submitters")
    add_database_options(parser)
    parser.add_argument("--array", action="store_true", help="submit the N sessions as one job array")
    parser.add_argument(
        "--compare-slurm",
        action="store_true",
        help="then run the same N on a local Slurm (slurm-wlm) with the same CPUs and print the ratio",
    )
    parser.add_argument("--slurm-untuned", action="store_true", help="Slurm's default settings")
    parser.add_argument(
        "--compare-postgres",
        action="store_true",
        help="run each round on SQLite, then on a throwaway PostgreSQL cluster, and print the ratio",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="jobs each system runs before the measured ones, waited for (Corral: submitted as the"
        " measured ones are; Slurm: one array): a figure of a running installation, not of its first"
        " seconds (default: as many as --n; 0: none)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the work dir (database, logs) and print where it is"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="repeat the whole run (and Slurm's, with --compare-slurm) this many times, alternating,"
        " and print the median as well as every round",
    )
    args = parser.parse_args()
    if args.compare_slurm and not slurm.available():
        raise SystemExit("--compare-slurm needs Slurm: apt-get install -y slurm-wlm")
    if args.rounds < 1:
        raise SystemExit("--rounds must be 1 or more")
    if args.warmup is None:
        # As many as measured: on PostgreSQL each pooled connection plans a statement afresh for its
        # first five runs (then caches a plan), and a cycle's statements run about once per 11
        # sessions, spread over a dozen connections.  With 128 the measure still paid those plans:
        # the agents' report statement planned in 46 of its 195 runs, the session moves in 53 of 90
        # (a quarter of the server's statement time); after 1,000, 1 and 7.
        args.warmup = args.n
    if args.warmup < 0:
        raise SystemExit("--warmup must be 0 or more")
    if args.compare_postgres and (args.postgres or args.database_url):
        raise SystemExit("--compare-postgres runs on SQLite and on its own PostgreSQL: give no database")
    ours: list[float] = []
    ratios: list[float] = []
    pg_rates: list[float] = []
    on_postgres: list[float] = []
    drifts: list[float | None] = []
    all_ok = True
    for r in range(args.rounds):
        if args.rounds > 1:
            print(f"round {r + 1} of {args.rounds}", flush=True)
        span, ok, used = run_corral(args)
        all_ok = all_ok and ok == args.n
        ours.append(args.n / span)
        if args.compare_postgres:
            pg_span, pg_ok, pg_used = run_corral(argparse.Namespace(**{**vars(args), "postgres": True}))
            all_ok = all_ok and pg_ok == args.n
            pg_rates.append(args.n / pg_span)
            on_postgres.append(span / pg_span)
            drifts.append(drift := same_work_drift(used, pg_used))
            moved = ""
            if drift is not None:
                moved = (
                    f" (the agents' CPU per session {drift:+.0%} in the second run;"
                    f" {span / pg_span * (1 + drift):.0%} at the first run's speed)"
                )
            print(f"postgresql / sqlite: {span / pg_span:.0%}{moved}", flush=True)
        if args.compare_slurm:
            # After Corral has stopped: the two never share the machine's cores.
            with slurm.LocalSlurm(2 * args.cpus, tuned=not args.slurm_untuned) as local:
                if args.warmup:
                    local.run(args.warmup, True)
                seconds = local.run(args.n, args.array, args.concurrency)
            theirs = args.n / seconds
            kind = "default" if args.slurm_untuned else "tuned"
            print(f"slurm ({kind}, {'one array' if args.array else 'N sbatch'}): {theirs:.1f} jobs/s")
            print(f"corral / slurm: {args.n / span / theirs:.2f}x", flush=True)
            ratios.append(args.n / span / theirs)
    if args.rounds > 1:
        backend = " on sqlite" if args.compare_postgres else ""
        print(f"rounds: {', '.join(f'{x:.1f}' for x in ours)} sessions/s{backend}")
        print(f"median throughput{backend}: {statistics.median(ours):.1f} sessions/s")
        if ratios:
            print(f"rounds: {', '.join(f'{x:.2f}x' for x in ratios)}")
            print(f"median corral / slurm: {statistics.median(ratios):.2f}x")
        if on_postgres:
            print(f"rounds: {', '.join(f'{x:.1f}' for x in pg_rates)} sessions/s on postgresql")
            print(f"median throughput on postgresql: {statistics.median(pg_rates):.1f} sessions/s")
            print(f"rounds: {', '.join(f'{x:.0%}' for x in on_postgres)} (postgresql / sqlite)")
            if None not in drifts:
                shown = ", ".join(f"{d:+.0%}" for d in drifts if d is not None)
                print(f"the agents' CPU per session, postgresql's run against sqlite's: {shown}")
                steady = [r * (1 + d) for r, d in zip(on_postgres, drifts, strict=True) if d is not None]
                print(
                    f"median postgresql / sqlite at the sqlite run's speed: {statistics.median(steady):.0%}"
                    f" ({', '.join(f'{x:.0%}' for x in steady)})"
                )
            print(
                f"median postgresql / sqlite: {statistics.median(on_postgres):.0%}"
                f" (mean {statistics.mean(on_postgres):.0%})"
            )
    return 0 if all_ok else 1


def wait_ended(
    http: httpx.Client, n: int, before: int, every: float, stuck: str, since: float | None = None
) -> int:
    """Until N sessions beyond the `before` already ended have ended, and none runs; how many have
    ended then.  With `since` (a monotonic time), progress is printed as it goes.  A run in which
    none ends for STALL seconds stops with `stuck` (a stuck run is a finding, not a figure: it is
    not waited on for ever)."""
    last, seen = time.monotonic(), -1
    while True:
        done, made = tally(http)
        if done != seen:
            if since is not None:
                print(f"  {done - before}/{n} ended after {time.monotonic() - since:.1f}s", flush=True)
            seen, last = done, time.monotonic()
        if done - before >= n and done == made:
            return done
        if time.monotonic() - last > STALL:
            raise SystemExit(f"no session ended for {STALL:.0f}s ({done - before}/{n} ended): {stuck}")
        time.sleep(every)


def warm(http: httpx.Client, n: int, submit: Callable[[int, str], object]) -> int:
    """Run N sessions as the measure submits them and wait until nothing runs: the manager's pool
    has grown to the load's width and its connections have planned their statements, the agents
    have started kernels, before the measure.  Returns how many sessions had ended then (the
    measure counts from there)."""
    first = time.monotonic()
    submit(n, WARMUP)
    done = wait_ended(http, n, 0, 0.1, "the warm-up is stuck")
    print(f"warm-up: {n} sessions in {time.monotonic() - first:.1f}s", flush=True)
    return done


# The part whose work is the same on either backend: its CPU per session moving between the two
# runs of a round is the machine's speed moving (this VM's swings by 10-30% within minutes).
SAME_WORK = "agents and their kernels"


def same_work_drift(first: Reading, second: Reading) -> float | None:
    """How much more CPU the agents' same work cost in `second` (0.1: 10% more); None when either
    was not read."""
    if not first.parts.get(SAME_WORK) or SAME_WORK not in second.parts:
        return None
    return second.parts[SAME_WORK] / first.parts[SAME_WORK] - 1


def run_corral(args: argparse.Namespace) -> tuple[float, int, Reading]:
    """One run on a fresh installation: (first submit -> last terminal status, sessions that
    ended successfully, the CPU the span cost)."""
    databases = ExitStack()
    work = scratch("corral-bench-", databases, args.keep)
    work.chmod(0o711)  # kernels run as the agents' unprivileged account: they must reach their dirs
    database_url = databases.enter_context(database(args, work))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    key, token = "crl_bench_" + os.urandom(8).hex(), "bench-" + os.urandom(8).hex()
    env = {
        **os.environ,
        "CORRAL_DATABASE_URL": database_url,
        "CORRAL_PORT": str(port),
        "CORRAL_AGENT_TOKEN": token,
        "CORRAL_BOOTSTRAP_ADMIN_KEY": key,
        "CORRAL_LOOP_INTERVAL": "0.2",
    }
    py = sys.executable
    profile = (
        ["-m", "cProfile", "-o", os.environ["CORRAL_BENCH_PROFILE"]]
        if os.environ.get("CORRAL_BENCH_PROFILE")
        else []
    )
    procs = [start([py, *profile, "-m", "corral", "manager"], env, work / "manager.log")]
    http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if http.get("/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("manager did not start; see " + str(work / "manager.log"))
            time.sleep(0.1)
        for i in (1, 2):
            procs.append(
                start(
                    [
                        py,
                        "-m",
                        "corral",
                        "agent",
                        "--manager",
                        url,
                        "--id",
                        f"bench-{i}",
                        "--cpu",
                        str(args.cpus),
                        "--work-dir",
                        str(work / f"a{i}"),
                    ],
                    env,
                    work / f"agent{i}.log",
                )
            )
        while len([a for a in http.get("/api/v1/agents").json() if a["status"] == "ALIVE"]) < 2:
            if any(p.poll() is not None for p in procs):
                raise SystemExit(f"an agent or the manager exited; see the logs in {work}")
            time.sleep(0.1)
        print(machine(database_url), flush=True)

        def submit(n: int, name: str = "bench") -> float:
            if args.array:
                return submit_array(http, n, name)
            return asyncio.run(submit_all(url, key, n, args.concurrency, name))

        before = warm(http, args.warmup, submit) if args.warmup else 0
        print(
            f"corral bench: {args.n} sessions, 2 agents x {args.cpus} CPUs, "
            f"{'one array' if args.array else 'N submits'}",
            flush=True,
        )
        meter = Meter(
            {
                "manager": [procs[0].pid],
                SAME_WORK: [p.pid for p in procs[1:]],
                **({"postgresql": [pid]} if (pid := server_pid(database_url)) else {}),
            }
        )
        used = meter.read()
        started = time.monotonic()
        submit_seconds = submit(args.n)
        print(f"submitted in {submit_seconds:.2f}s ({args.n / submit_seconds:.0f} submits/s)", flush=True)
        stuck = f"stuck; run again with --keep to keep the logs ({work})"
        wait_ended(http, args.n, before, 0.5, stuck, since=started)
        used = meter.since(used)
        span, ok = server_span(http)
        print(f"sessions ended successfully: {ok}/{args.n}")
        print(f"first submit -> last terminal status: {span:.2f}s")
        print(f"throughput: {args.n / span:.1f} sessions/s")
        busy = used.machine / (span * (os.cpu_count() or 1))
        print(f"{per_session(used, args.n)}; the cores {busy:.0%} busy over the span", flush=True)
    finally:
        for p in reversed(procs):
            p.terminate()
        for name, p in zip(["manager", "agent 1", "agent 2"], procs, strict=False):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                # A bug, not a bench detail: said loudly, and the process not left running.
                print(f"the {name} did not stop within 15 s of SIGTERM: killed", file=sys.stderr)
                p.kill()
                p.wait()
        databases.close()
    return span, ok, used


if __name__ == "__main__":
    sys.exit(main())
