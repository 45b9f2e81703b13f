"""Kernel exit -> its child RUNNING, with retry_delay 0: p50/p95 over N failures (DESIGN §5).

Starts its own manager and agent (SQLite by default, or --database-url), submits N sessions
that fail at once with `--max-retries 1 --retry-delay 0`, one at a time on an idle cluster,
and reads the times from the server: the parent kernel's agent-observed exit time and the
child's started_at.

    .venv/bin/python bench/retry_latency.py --n 200 [--database-url postgresql+asyncpg://...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import add_database_options, database, machine, scratch
from tests.support.cluster import TERMINAL, Cluster, poll


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="failures to measure")
    add_database_options(parser)
    args = parser.parse_args()
    databases = ExitStack()
    work = scratch("corral-bench-retry-", databases)
    url = databases.enter_context(database(args, work))
    c = Cluster(url, work, env={"CORRAL_LOOP_INTERVAL": os.environ.get("BENCH_LOOP", "1.0")})
    try:
        c.start_manager()
        c.start_agent("bench-agent", cpu=4)
        latencies = []
        parts: dict[str, list[float]] = {"exit->ended": [], "ended->child made": [], "made->RUNNING": []}
        body = {"command": ["sh", "-c", "exit 3"], "retry_policy": {"max_retries": 1, "retry_delay": 0}}
        for _ in range(args.n):
            first = c.submit(**body)["id"]

            def child_running(first: str = first) -> dict | None:
                parent = c.session(first)
                child_id = parent.get("next_attempt_id")
                if not child_id:
                    return None
                child = c.session(child_id)
                return child if child.get("started_at") else None

            # The figures come from the server's own timestamps: polling gently keeps the load off them.
            child = poll(child_running, 60, "the child to start", interval=0.25)
            parent = c.session(first)
            exited = parent["kernels"][0]["exited_at"] or parent["terminated_at"]
            ended = datetime.fromisoformat(exited).timestamp()
            started = datetime.fromisoformat(child["started_at"]).timestamp()
            latencies.append(started - ended)
            terminated = datetime.fromisoformat(parent["terminated_at"]).timestamp()
            made = datetime.fromisoformat(child["created_at"]).timestamp()
            parts["exit->ended"].append(terminated - ended)
            parts["ended->child made"].append(made - terminated)
            parts["made->RUNNING"].append(started - made)
            poll(lambda cid=child["id"]: c.session(cid)["status"] in TERMINAL, 60, "the child to end", 0.25)
        third = max(1, len(latencies) // 3)
        drift = statistics.median(latencies[-third:]) - statistics.median(latencies[:third])
        latencies.sort()
        p50 = statistics.median(latencies)
        p95 = latencies[int(0.95 * (len(latencies) - 1))]
        print(f"{machine(url)}  failures: {len(latencies)}")
        print(f"kernel exit -> child RUNNING: p50 {p50 * 1000:.0f} ms  p95 {p95 * 1000:.0f} ms")
        print(f"  later third minus first third (medians): {drift * 1000:+.0f} ms")
        print(
            "  median of each step: "
            + ", ".join(f"{k} {statistics.median(v) * 1000:.0f} ms" for k, v in parts.items())
        )
    finally:
        c.close()
        databases.close()


if __name__ == "__main__":
    t0 = time.monotonic()
    main()
    print(f"took {time.monotonic() - t0:.0f} s")
