"""Latency on an idle cluster: N sequential 1-CPU `true` sessions (each submitted after the one
before has ended); p50/p95 from submit to RUNNING and to TERMINATED, by the server's own timestamps.

    .venv/bin/python bench/latency.py [--n 200] [--database-url postgresql+asyncpg://...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path

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
        for _ in range(args.n):
            s = c.wait(c.submit(command=["true"], resources={"cpu": 1})["id"], timeout=60)
            assert s["result"] == "success", s
            running.append(at(s["started_at"]) - at(s["created_at"]))
            ended.append(at(s["terminated_at"]) - at(s["created_at"]))
        print(machine(url))
        for name, values in (("submit -> RUNNING", running), ("submit -> TERMINATED", ended)):
            print(
                f"{name}: p50 {pct(values, 0.5) * 1000:.0f} ms  p95 {pct(values, 0.95) * 1000:.0f} ms"
                f"  mean {statistics.mean(values) * 1000:.0f} ms  (n={len(values)})"
            )
    finally:
        c.close()
        databases.close()


if __name__ == "__main__":
    main()
