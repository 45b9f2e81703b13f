"""Latency on an idle cluster: N sequential 1-CPU `true` sessions (each submitted after the one
before has ended); p50/p95 from submit to RUNNING and to TERMINATED, by the server's own timestamps.
Then where the time goes: the median time from the submit to each status the session entered on
the way (its history, stamped with the clock of the cycle that moved it) and to its kernel's start
being recorded (`started_at`, what "submit -> RUNNING" measures: the session's own RUNNING follows
one cycle later).

    .venv/bin/python bench/latency.py [--n 200] [--database-url postgresql+asyncpg://...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import add_database_options, at, database, machine, pct, scratch
from tests.support.cluster import Cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    add_database_options(parser)
    args = parser.parse_args()
    databases = ExitStack()
    work = scratch("corral-bench-latency-", databases)
    url = databases.enter_context(database(args, work))
    c = Cluster(url, work)
    try:
        c.start_manager()
        c.start_agent("bench-a", cpu=32, mem="64G")
        c.start_agent("bench-b", cpu=32, mem="64G")
        c.wait(c.submit(command=["true"])["id"])  # warm-up: imports, first connections
        running: list[float] = []
        ended: list[float] = []
        steps: dict[str, list[float]] = {}
        for _ in range(args.n):
            s = c.wait(c.submit(command=["true"], resources={"cpu": 1})["id"], timeout=60)
            assert s["result"] == "success", s
            running.append(at(s["started_at"]) - at(s["created_at"]))
            ended.append(at(s["terminated_at"]) - at(s["created_at"]))
            for step, seconds in _steps(c, s).items():
                steps.setdefault(step, []).append(seconds)
        print(machine(url))
        for name, values in (("submit -> RUNNING", running), ("submit -> TERMINATED", ended)):
            print(
                f"{name}: p50 {pct(values, 0.5) * 1000:.0f} ms  p95 {pct(values, 0.95) * 1000:.0f} ms"
                f"  mean {statistics.mean(values) * 1000:.0f} ms  (n={len(values)})"
            )
        # Statuses one move passes share a time: those keep the history's order.
        medians = sorted((statistics.median(v), i, k) for i, (k, v) in enumerate(steps.items()))
        print("median from the submit: " + ", ".join(f"{k} +{m * 1000:.1f} ms" for m, _, k in medians))
    finally:
        c.close()
        databases.close()


def _steps(c: Cluster, s: dict[str, Any]) -> dict[str, float]:
    """Seconds from the submit to each status the session entered up to RUNNING, and to its
    kernel's start being recorded."""
    submitted = at(s["created_at"])
    out = {"kernel started": at(s["started_at"]) - submitted}
    for h in c.history(s["id"]):
        if h["to_status"]:
            out[h["to_status"]] = at(h["created_at"]) - submitted
        if h["to_status"] == "RUNNING":
            break
    return out


if __name__ == "__main__":
    main()
