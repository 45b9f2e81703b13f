"""Webhook delivery: one webhook on every session event, to a receiver in a process of its own,
while N 1-CPU `true` sessions run.  Prints p50/p95 from an event's creation (`created_at`,
written by the manager in the event's transaction, on this host's clock) to its arrival at the
receiver, and the manager's CPU per session beside the same N sessions with no webhook, in the
same run.  Then N more with the manager kill -9'd K times mid-run (restarted at once, on the
default lease): every event must arrive at least once, and the duplicates are set beside the
deliveries in flight at each kill (received, but past the cursor the dead manager left).

    .venv/bin/python bench/webhooks.py [--n 1000] [--kills 2] [--postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil

from bench.common import (
    add_database_options,
    ended,
    get_json,
    machine,
    pct,
    submit_true,
    two_wide_agents,
)
from corral.domain.events import Position
from tests.support.cluster import Cluster

TYPES = ["session.*"]


def receive() -> None:
    """The receiver's process: prints its URL; answers every POST 200 and keeps, per delivery,
    its webhook-id, arrival time and the event's `created_at`; a line on stdin prints them all."""
    got: list[tuple[str, float, str]] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the sender reuses its connection

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            now = time.time()
            created = json.loads(body)["data"]["created_at"]
            with lock:
                got.append((self.headers["webhook-id"], now, created))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"http://127.0.0.1:{server.server_address[1]}/hook", flush=True)
    for _ in sys.stdin:
        with lock:
            print(json.dumps(got), flush=True)


class Receiver:
    def __init__(self, stack: ExitStack) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--receive"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        stack.callback(self.proc.kill)
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.url = self.proc.stdout.readline().strip()

    def received(self) -> list[tuple[str, float, str]]:
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return [tuple(r) for r in json.loads(self.proc.stdout.readline())]  # type: ignore[misc]


def wait_until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.2)


def expected(c: Cluster, after: str) -> set[str]:
    """The webhook-ids of every session event after `after`, paged through GET /events."""
    ids: set[str] = set()
    while True:
        page = get_json(c, "/api/v1/events", after=after, type=TYPES, limit=1000)
        ids |= {f"msg_{e['position']}" for e in page}
        if len(page) < 1000:
            return ids
        after = page[-1]["position"]


def position(webhook_id: str) -> Position:
    return Position.parse(webhook_id.removeprefix("msg_"))


def cursor(url: str, hook_id: str) -> Position:
    """The webhook's cursor as the database has it (read while its manager is dead)."""
    from sqlalchemy import select
    from sqlalchemy.ext.asyncio import create_async_engine

    from corral.store.webhook_tables import webhooks

    async def read() -> Position:
        engine = create_async_engine(url)
        try:
            async with engine.connect() as conn:
                row = (
                    await conn.execute(
                        select(webhooks.c.cursor_txid, webhooks.c.cursor_id).where(webhooks.c.id == hook_id)
                    )
                ).one()
                return Position(row[0], row[1])
        finally:
            await engine.dispose()

    return asyncio.run(read())


def lags(got: list[tuple[str, float, str]], ids: set[str]) -> list[float]:
    first: dict[str, float] = {}
    for webhook_id, at, created in got:
        if webhook_id in ids and webhook_id not in first:
            first[webhook_id] = at - datetime.fromisoformat(created).timestamp()
    return sorted(first.values())


def cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--kills", type=int, default=2)
    parser.add_argument("--receive", action="store_true", help=argparse.SUPPRESS)
    add_database_options(parser)
    args = parser.parse_args()
    if args.receive:
        receive()
        return
    with ExitStack() as stack:
        url, c = two_wide_agents(args, stack, "corral-bench-webhooks-")
        resp = c.http.patch("/api/v1/cluster-config", json={"webhooks": {"allow_private": True}})
        assert resp.status_code == 200, resp.text
        rx = Receiver(stack)
        manager = psutil.Process(c.manager.pid)  # type: ignore[union-attr]
        before = submit_true(c, 50)  # warm-up: imports, first connections
        wait_until(lambda: ended(c) >= before + 50, 600, "the warm-up")

        cpu0, before = cpu(manager), submit_true(c, args.n)
        wait_until(lambda: ended(c) >= before + args.n, 900, f"{args.n} sessions to end")
        alone = (cpu(manager) - cpu0) / args.n

        resp = c.http.post("/api/v1/webhooks", json={"url": rx.url, "events": TYPES})
        assert resp.status_code == 201, resp.text
        hook = resp.json()
        start = hook["position"]
        cpu0, t0, before = cpu(manager), time.monotonic(), submit_true(c, args.n)
        wait_until(lambda: ended(c) >= before + args.n, 900, f"{args.n} sessions to end")
        want = expected(c, start)
        wait_until(lambda: want <= {r[0] for r in rx.received()}, 600, f"{len(want)} deliveries")
        hooked, took = (cpu(manager) - cpu0) / args.n, time.monotonic() - t0
        first = lags(rx.received(), want)

        mark = max(want, key=position).removeprefix("msg_")
        flights: list[int] = []
        before = submit_true(c, args.n)
        per_session = len(want) / args.n
        for k in range(1, args.kills + 1):
            goal = len(rx.received()) + per_session * args.n / (args.kills + 1)
            wait_until(lambda g=goal: len(rx.received()) >= g, 600, f"deliveries before kill {k}")
            c.kill_manager()
            left = cursor(url, hook["id"])
            flights.append(sum(1 for r in {r[0] for r in rx.received()} if position(r) > left))
            c.start_manager()
        wait_until(lambda: ended(c) >= before + args.n, 900, f"{args.n} sessions to end")
        want2 = expected(c, mark)
        wait_until(lambda: want2 <= {r[0] for r in rx.received()}, 900, f"{len(want2)} deliveries")
        got = [r for r in rx.received() if r[0] in want2]
        duplicates = len(got) - len({r[0] for r in got})
    p50, p95 = pct(first, 0.5) * 1000, pct(first, 0.95) * 1000
    print(machine(url))
    print(f"{args.n} sessions, one webhook on {TYPES[0]}: {len(want)} events, all delivered", end="")
    print(f" in {took:.1f} s ({len(want) / took:.0f}/s)")
    print(f"event created -> at the receiver: p50 {p50:.0f} ms  p95 {p95:.0f} ms (bar p50 250 ms)")
    print(f"manager CPU per session: {alone * 1000:.2f} ms alone, {hooked * 1000:.2f} ms", end="")
    print(f" with the webhook ({hooked / alone:.2f}x)")
    print(f"{args.n} more with {args.kills} kill -9: {len(want2)} events, all delivered at least once;")
    print(f"  duplicates {duplicates}, in flight at the kills {'+'.join(map(str, flights))}", end="")
    print(f" (bar: duplicates <= {sum(flights)})")


if __name__ == "__main__":
    main()
