"""How fast the CLI answers: `corral --help`, and `corral session list` against an idle `corral up`
(its own HOME, its defaults, the key it saved) holding 100 ended sessions; each the median of N
runs with warm `.pyc`, beside `python -c pass` timed in the same run (this machine's speed drifts).

    .venv/bin/python bench/cli.py [--runs 20]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import psutil

from bench.common import scratch
from tests.support.cluster import poll
from tests.support.embedded import Up

SESSIONS = 100


def timed(argv: list[str], env: dict[str, str], runs: int) -> float:
    """The median wall time of `argv`, in ms, after one run that warms the `.pyc` files."""
    took = []
    for i in range(runs + 1):
        start = time.perf_counter()
        done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
        if i:
            took.append(elapsed)
    return statistics.median(took) * 1000


def idle(up: Up) -> bool:
    """Its processes used under 5% of a core over the last half second: nothing is left to do."""
    procs = [psutil.Process(pid) for pid in up.tree()]
    for p in procs:
        p.cpu_percent()
    time.sleep(0.5)
    return sum(p.cpu_percent() for p in procs) < 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each command (their median is printed)")
    args = parser.parse_args()
    python = sys.executable
    with ExitStack() as stack:
        up = Up(scratch("corral-bench-cli-", stack) / "home")
        stack.callback(up.close)
        specs = [{"command": ["true"], "name": f"cli-{i}"} for i in range(SESSIONS)]
        headers = {"Authorization": f"Bearer {up.key}"}
        httpx.post(f"{up.url}/api/v1/sessions/bulk", json={"sessions": specs}, headers=headers, timeout=60)
        ended = lambda: up.get("/api/v1/sessions/counts").get("TERMINATED") == SESSIONS  # noqa: E731
        poll(ended, 300, f"{SESSIONS} sessions to end")
        poll(lambda: idle(up), 60, "corral up to be idle")
        env = dict(up.env)  # a user's: the CLI finds the server and key in the config `up` saved
        # Warm `.pyc` as a user's machine has them: the first run of each command writes them
        # (an environment that forbids it would time the compiler instead).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        baseline = timed([python, "-c", "pass"], env, args.runs)
        help_ms = timed([python, "-m", "corral", "--help"], env, args.runs)
        listed = timed([python, "-m", "corral", "session", "list"], env, args.runs)
    print(f"python -c pass: {baseline:.0f} ms (median of {args.runs})")
    for what, ms, bar in (
        ("corral --help", help_ms, 150),
        (f"corral session list, {SESSIONS} sessions", listed, 300),
    ):
        # The machine's speed swings by 2x between hours; start-up is CPU-bound, so its ratio to
        # the interpreter's own start is what compares across runs (scaled to a 10 ms start).
        print(
            f"{what}: {ms:.0f} ms (bar {bar} ms); {ms / baseline:.1f}x python -c pass,"
            f" {10 * ms / baseline:.0f} ms at a 10 ms python -c pass"
        )


if __name__ == "__main__":
    main()
