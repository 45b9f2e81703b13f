"""SSE fan-out: S concurrent `/events/stream` subscribers (in a process of their own) while N
1-CPU `true` sessions run; p50/p95 from an event's creation (`created_at`, written by the manager
in the event's transaction, on this host's clock) to its arrival at a subscriber (timed by 10 of
them, the others only reading); the manager's
RSS sampled each second after warm-up (max/min); and the manager's CPU per session beside the
same N sessions run with no subscriber, in the same run.

    .venv/bin/python bench/stream.py [--subscribers 200] [--n 1000] [--pace 0] [--postgres]

With --pace S the watched sessions are submitted over S seconds (else at once): the RSS samples
then span the run (at once, the run after warm-up lasts a few seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import psutil

from bench.common import (
    add_database_options,
    ended,
    machine,
    pct,
    submit_true,
    two_wide_agents,
)
from tests.support.cluster import Cluster, poll

MEASURED = 10
"""Subscribers that parse every message and time it; the others only find its id in the bytes,
so that this process (on the same 2 cores) times the manager's delivery, not its own parsing."""


async def _one(
    http: httpx.AsyncClient, opened: list[int], lags: list[float], last: dict[int, str], i: int
) -> None:
    from corral.client.sse import Parser

    parser = Parser()
    async with http.stream("GET", "/api/v1/events/stream") as resp:
        if i >= MEASURED:
            async for chunk in resp.aiter_bytes():
                at = chunk.rfind(b"id: ")
                end = chunk.find(b"\r\n", at)
                if at >= 0 and end > at:  # (an id cut by the chunk's end is in the next one's frames)
                    last[i] = chunk[at + 4 : end].decode()
                    opened[i] = 1
            return
        async for line in resp.aiter_lines():
            message = parser.feed(line)
            if parser.last_id is not None and not opened[i]:
                opened[i] = 1
            if message is None:
                continue
            now = time.time()
            event = json.loads(message.data)
            lags.append(now - datetime.fromisoformat(event["created_at"]).timestamp())
            last[i] = event["position"]


async def subscribe(url: str, key: str, n: int) -> None:
    """The subscribers' process: prints "ready" once all are open; on a position read from
    stdin, waits for every subscriber to reach it and prints the lags as JSON."""
    limits = httpx.Limits(max_connections=n + 5)
    timeout = httpx.Timeout(10, read=120)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=timeout) as http:
        opened: list[int] = [0] * n
        lags: list[float] = []
        last: dict[int, str] = {}
        tasks = [asyncio.create_task(_one(http, opened, lags, last, i)) for i in range(n)]
        while sum(opened) < n:  # noqa: ASYNC110  (a count, polled: no event to set)
            await asyncio.sleep(0.05)
        print("ready", flush=True)
        lags.clear()
        line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        from corral.domain.events import Position

        final = Position.parse(line.strip())
        deadline = time.monotonic() + 120
        while any(i not in last or Position.parse(last[i]) < final for i in range(n)):
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        print(json.dumps({"lags": lags, "reached": sum(1 for i in range(n) if i in last)}), flush=True)
        for t in tasks:
            t.cancel()


def run_sessions(c: Cluster, n: int, over: float = 0.0) -> None:
    """`n` sessions submitted 100 at a time (spread over `over` seconds), returning once all have
    ended."""
    before = submit_true(c, n, over)
    poll(lambda: ended(c) >= before + n, 600, f"{n} sessions to end")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=200)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument(
        "--pace",
        type=float,
        default=0.0,
        help="spread the watched sessions' submissions over this many seconds",
    )
    parser.add_argument("--subscribe", nargs=3, metavar=("URL", "KEY", "S"), help=argparse.SUPPRESS)
    add_database_options(parser)
    args = parser.parse_args()
    if args.subscribe:
        asyncio.run(subscribe(args.subscribe[0], args.subscribe[1], int(args.subscribe[2])))
        return
    with ExitStack() as stack:
        url, c = two_wide_agents(args, stack, "corral-bench-stream-")
        manager = psutil.Process(c.manager.pid)  # type: ignore[union-attr]
        run_sessions(c, 50)  # warm-up: imports, first connections
        cpu0 = manager.cpu_times()
        run_sessions(c, args.n, args.pace)  # paced as the watched run: CPU per session alike
        cpu1 = manager.cpu_times()
        alone = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / args.n
        subs = subprocess.Popen(
            [sys.executable, __file__, "--subscribe", c.url, c.key, str(args.subscribers)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ},
        )
        stack.callback(subs.kill)
        assert subs.stdout is not None and subs.stdin is not None
        assert subs.stdout.readline().strip() == "ready"
        rss: list[int] = []
        sampling = threading.Event()

        def sample() -> None:
            time.sleep(5)  # warm-up: the first sessions' allocations
            while not sampling.wait(1.0):
                rss.append(manager.memory_info().rss)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        cpu2 = manager.cpu_times()
        run_sessions(c, args.n, args.pace)
        cpu3 = manager.cpu_times()
        sampling.set()
        watched = (cpu3.user + cpu3.system - cpu2.user - cpu2.system) / args.n
        final = c.http.get("/api/v1/events", params={"newest": "true", "limit": 1}).json()[0]["position"]
        subs.stdin.write(final + "\n")
        subs.stdin.flush()
        result: dict[str, Any] = json.loads(subs.stdout.readline())
        lags = sorted(result["lags"])
    p50, p95 = pct(lags, 0.5) * 1000, pct(lags, 0.95) * 1000
    print(machine(url))
    print(f"{args.subscribers} subscribers, {args.n} sessions: {len(lags)} deliveries timed", end="")
    print(f", {result['reached']} subscribers reached the last event")
    print(f"event created -> at a subscriber: p50 {p50:.0f} ms  p95 {p95:.0f} ms (bar p50 100 ms)")
    if rss:
        print(f"manager RSS over {len(rss)} s: {min(rss) >> 20}-{max(rss) >> 20} MiB", end="")
        print(f", max/min {max(rss) / min(rss):.3f} (bar 1.1)")
    print(f"manager CPU per session: {alone * 1000:.2f} ms alone, {watched * 1000:.2f} ms", end="")
    print(f" with the subscribers ({watched / alone:.2f}x)")


if __name__ == "__main__":
    main()
