"""Preemption speed (DESIGN §6): a full cluster of priority-1 sleepers, one priority-50 session that
needs a whole agent, grace 0; p50/p95 from its submit to RUNNING and from its end to its victims
all running again (requeued by the retry engine at their old place).

    .venv/bin/python bench/preemption.py [--rounds 20] [--cpus 32] [--database-url ...]
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
from tests.support.cluster import Cluster, poll


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--cpus", type=int, default=32, help="CPUs each of the 2 agents declares")
    add_database_options(parser)
    args = parser.parse_args()
    databases = ExitStack()
    work = scratch("corral-bench-preempt-", databases)
    url = databases.enter_context(database(args, work))
    c = Cluster(url, work)
    try:
        c.start_manager()
        c.start_agent("bench-a", cpu=args.cpus, mem="64G")
        c.start_agent("bench-b", cpu=args.cpus, mem="64G")
        assert c.corral("rg", "set", "default", "grace_period=0", "min_runtime=0").returncode == 0
        sleepers = [
            c.submit(command=["sleep", "3600"], priority=1, resources={"cpu": 1})["id"]
            for _ in range(2 * args.cpus)
        ]

        def all_running() -> bool:
            listed = c.http.get("/api/v1/sessions", params={"status": "RUNNING", "limit": 1000}).json()
            return len(listed) >= 2 * args.cpus

        poll(all_running, 300, "the cluster to fill", interval=0.5)
        to_running: list[float] = []
        back: list[float] = []
        for _ in range(args.rounds):
            urgent = c.submit(command=["sleep", "1"], priority=50, resources={"cpu": args.cpus})
            done = c.wait(urgent["id"], timeout=120)
            to_running.append(at(done["started_at"]) - at(done["created_at"]))
            victims = [
                s
                for s in c.http.get("/api/v1/sessions", params={"limit": 1000}).json()
                if s["cause"] == "preempted" and s["next_attempt_id"]
            ]
            fresh = [v for v in victims if at(v["terminated_at"]) >= at(done["created_at"])]

            def requeued(fresh: list[dict[str, Any]] = fresh) -> list[dict[str, Any]] | None:
                children = [c.session(v["next_attempt_id"]) for v in fresh]
                return children if all(ch["started_at"] for ch in children) else None

            children = poll(requeued, 120, "the victims to run again", interval=0.2)
            back.append(max(at(ch["started_at"]) for ch in children) - at(done["terminated_at"]))
            poll(all_running, 120, "the cluster to be full again", interval=0.2)
        print(machine(url))
        print(
            f"cluster: 2 agents x {args.cpus} CPUs, {len(sleepers)} priority-1 sleepers; {args.rounds} rounds"
        )
        p50, p95 = statistics.median(to_running) * 1000, pct(to_running, 0.95) * 1000
        print(f"submit -> RUNNING (priority 50, {args.cpus} CPUs): p50 {p50:.0f} ms  p95 {p95:.0f} ms")
        print(
            f"preemptor end -> every victim running again: p50 {statistics.median(back) * 1000:.0f} ms"
            f"  p95 {pct(back, 0.95) * 1000:.0f} ms"
        )
    finally:
        c.close()
        databases.close()


if __name__ == "__main__":
    main()
