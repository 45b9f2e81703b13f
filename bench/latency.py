"""Latency on an idle cluster: N sequential 1-CPU `true` sessions (each submitted after the one
before has ended); p50/p95 from submit to RUNNING and to TERMINATED, by the server's own timestamps.

    .venv/bin/python bench/latency.py [--n 200] [--database-url postgresql+asyncpg://...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.cluster import Cluster


def at(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--database-url", default="", help="default: a new SQLite file")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="corral-bench-latency-"))
    url = args.database_url or f"sqlite+aiosqlite:///{work}/corral.db"
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
        print(
            f"cores: {os.cpu_count()}  backend: {'postgresql' if url.startswith('postgresql') else 'sqlite'}"
        )
        for name, values in (("submit -> RUNNING", running), ("submit -> TERMINATED", ended)):
            print(
                f"{name}: p50 {pct(values, 0.5) * 1000:.0f} ms  p95 {pct(values, 0.95) * 1000:.0f} ms"
                f"  mean {statistics.mean(values) * 1000:.0f} ms  (n={len(values)})"
            )
    finally:
        c.close()


if __name__ == "__main__":
    main()
