"""How fast the CLI answers: `corral --help`, and `corral session list` against an idle embedded
Corral (a manager on SQLite and one agent) holding 100 ended sessions; each the median of N runs
with warm `.pyc`, beside `python -c pass` timed in the same run (this machine's speed drifts).

    .venv/bin/python bench/cli.py [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import scratch
from tests.support.cluster import Cluster

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each command (their median is printed)")
    args = parser.parse_args()
    python = sys.executable
    with ExitStack() as stack:
        work = scratch("corral-bench-cli-", stack)
        c = Cluster(f"sqlite+aiosqlite:///{work}/corral.db", work)
        stack.callback(c.close)
        c.start_manager()
        c.start_agent("bench-cli", cpu=8, mem="16G")
        ids = [c.submit(command=["true"], name=f"cli-{i}")["id"] for i in range(SESSIONS)]
        for sid in ids:
            c.wait(sid)
        env = {**os.environ, **c.env, "CORRAL_URL": c.url, "CORRAL_API_KEY": c.key}
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
