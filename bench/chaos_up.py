"""Chaos on `corral up`: N sessions with retries while one local agent is kill -9'd K times.

It starts `corral up` with a HOME of its own, submits N flaky sessions (each fails or succeeds at
random, up to 3 retries), kills one local agent with SIGKILL K times (each after the last has come
back), then waits for every chain to settle. It prints whether the manager ever stopped, how each
chain ended, how many agent restarts `corral up` logged, and how long it took. A chain counts as
lost if its latest attempt is not terminal or its retry was never decided.

    .venv/bin/python bench/chaos_up.py [--n 100] [--kills 5]
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.cluster import poll
from tests.support.embedded import Up

FLAKY = "import random, sys, time; time.sleep(random.uniform(1, 4)); sys.exit(random.choice([0, 7]))"
TERMINAL = ("TERMINATED", "CANCELLED", "ERROR")


def agent_pid(up: Up, agent_id: str) -> int | None:
    for a in up.get("/api/v1/agents"):
        if a["id"] == agent_id and a["status"] == "ALIVE":
            return int(a["info"]["pid"])
    return None


def settled(up: Up, first_ids: list[str]) -> dict[str, dict[str, Any]] | None:
    latest = {}
    for sid in first_ids:
        chain = up.get(f"/api/v1/sessions/{sid}/attempts")
        last = chain[-1]
        if last["status"] not in TERMINAL or last["retry_reason"] is None:
            return None
        latest[sid] = last
    return latest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="corral-chaos-"))
    started = time.monotonic()
    up = Up(home)
    manager_pid = up.proc.pid
    try:
        body = {
            "command": ["python3", "-c", FLAKY],
            "resources": {"cpu": 0.25},
            "retry_policy": {"max_retries": 3, "retry_delay": 0},
        }
        headers = {"Authorization": f"Bearer {up.key}"}
        firsts = []
        for _ in range(args.n):
            made = httpx.post(f"{up.url}/api/v1/sessions", json=body, headers=headers, timeout=30)
            assert made.status_code == 201, made.text
            firsts.append(made.json()["id"])
        rng = random.Random(1)
        kills = []
        for i in range(args.kills):
            victim = f"local-{rng.randint(1, 2)}"
            pid = poll(lambda v=victim: agent_pid(up, v), 120, f"{victim} to be alive")
            time.sleep(rng.uniform(0.5, 2.0))  # let it take work first
            os.kill(pid, signal.SIGKILL)
            kills.append((victim, pid))
            print(f"kill {i + 1}: {victim} (pid {pid}) at {time.monotonic() - started:.1f} s", flush=True)
            poll(lambda v=victim, p=pid: (q := agent_pid(up, v)) is not None and q != p, 120, "its restart")
            assert up.proc.poll() is None, "corral up stopped"
        latest = poll(lambda: settled(up, firsts), args.timeout, "every chain to settle")
        took = time.monotonic() - started
        alive = up.proc.poll() is None and psutil.pid_exists(manager_pid)
        outcomes = collections.Counter((s["status"], s["cause"]) for s in latest.values())
        attempts = sum(s["attempt"] for s in latest.values())
        log = up.log()
        print(f"sessions: {args.n} chains, {attempts} attempts; agent kills: {len(kills)}")
        print(f"corral up alive throughout: {alive}; restarts logged: {log.count('local agent restarted')}")
        print(
            f"deaths logged: {log.count('local agent died')}; leftovers killed: "
            f"{log.count('killing what a dead agent left')}"
        )
        for (status, cause), n in sorted(outcomes.items(), key=lambda kv: -kv[1]):
            print(f"  latest attempt {status:<10} cause {cause}: {n}")
        lost = args.n - len(latest)
        print(f"chains lost: {lost}; every chain decided: {len(latest) == args.n}; wall {took:.0f} s")
    finally:
        up.close()


if __name__ == "__main__":
    main()
