"""The /serve proxy: added latency and throughput against the replica reached directly, and
changes under load (a rolling update of 3 replicas, a replica killed with SIGKILL).

- Latency: one keep-alive connection, `--n` sequential GETs, direct and through /serve in
  alternating rounds; p50/p95 of each and the difference (bar: added p50 <= 2 ms).
- Throughput: `--conns` keep-alive connections from a load process of its own (raw sockets, so it
  costs less than what it measures) for `--seconds`, direct and through /serve; requests/s (bar:
  >= 1000 through /serve) and the manager's CPU per request.
- Under 50 requests/s: failed requests during a rolling update to a new revision (bar: 0), and
  after a SIGKILL of one replica: failures, seconds until its route left traffic, seconds until
  a replacement was HEALTHY.

    .venv/bin/python bench/serve.py [--n 2000] [--conns 32] [--seconds 10] [--postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import psutil

from bench.common import add_database_options, machine, pct
from tests.support.deployments import create, get, in_traffic, ready

REPLICA = (Path(__file__).parent / "echo_replica.py").read_text()


async def _hammer(host: str, port: int, path: str, key: str, conns: int, seconds: float) -> dict[str, float]:
    """`conns` connections each sending GETs back to back; counts answers by status."""
    request = (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {key}\r\n\r\n").encode()
    done = {"ok": 0, "bad": 0}
    stop = time.monotonic() + seconds

    async def one() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while time.monotonic() < stop:
                writer.write(request)
                status = await reader.readline()
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                done["ok" if b" 200 " in status else "bad"] += 1
        finally:
            writer.close()

    await asyncio.gather(*(one() for _ in range(conns)))
    return {"rate": done["ok"] / seconds, "bad": done["bad"]}


def _load_process(host: str, port: int, path: str, key: str, conns: int, seconds: float) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--hammer", host, str(port), path, key, str(conns), str(seconds)],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout))


def _latencies(url: str, key: str, n: int) -> list[float]:
    out = []
    with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=10) as http:
        http.get(url)
        for _ in range(n):
            t = time.perf_counter()
            resp = http.get(url)
            out.append(time.perf_counter() - t)
            assert resp.status_code == 200, resp.text
    return out


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--conns", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--hammer", nargs=6, help=argparse.SUPPRESS)
    add_database_options(parser)
    args = parser.parse_args()
    if args.hammer:
        host, port, path, key, conns, seconds = args.hammer
        print(json.dumps(asyncio.run(_hammer(host, int(port), path, key, int(conns), float(seconds)))))
        return
    from bench.common import database, scratch
    from tests.support.cluster import Cluster
    from tests.support.load import Load

    with ExitStack() as stack:
        work = scratch("corral-bench-serve-", stack)
        url = stack.enter_context(database(args, work))
        c = Cluster(url, work, {"CORRAL_DEPLOYMENT_INTERVAL": "0.5"})
        stack.callback(c.close)
        c.start_manager()
        c.start_agent("bench-a", cpu=4, mem="8G")
        manager = psutil.Process(c.manager.pid)  # type: ignore[union-attr]
        echo = {"command": ["python3", "-c", REPLICA], "resources": {"cpu": 1}}
        create(c.http, "echo", 1, session=echo, health={"interval": 1})
        address = in_traffic(ready(c.http, "echo", 1))[0]["address"]
        direct, proxied = f"http://{address}/", f"{c.url}/serve/echo/"
        d_lat: list[float] = []
        p_lat: list[float] = []
        for _ in range(4):  # alternating rounds: the machine's speed drifts
            d_lat += _latencies(direct, c.key, args.n // 4)
            p_lat += _latencies(proxied, c.key, args.n // 4)
        host, port = address.split(":")
        d_rate = _load_process(host, int(port), "/", c.key, args.conns, args.seconds)
        cpu0 = _cpu(manager)
        p_rate = _load_process("127.0.0.1", c.port, "/serve/echo/", c.key, args.conns, args.seconds)
        per_request = (_cpu(manager) - cpu0) / max(1.0, p_rate["rate"] * args.seconds)

        assert c.http.delete("/api/v1/deployments/echo").status_code == 202
        create(c.http, "roll", 3, session={**echo, "resources": {"cpu": 0.5}}, health={"interval": 1})
        ready(c.http, "roll", 3)
        with Load(c.url, c.key, "/serve/roll/", rate=50) as load:
            time.sleep(2)
            c.http.patch(
                "/api/v1/deployments/roll",
                json={"session": {**echo, "resources": {"cpu": 0.5}, "env": {"V": "2"}}},
            )
            t0 = time.monotonic()
            ready(c.http, "roll", 3, timeout=120, revision=2)
            rolled = time.monotonic() - t0
            time.sleep(2)
        roll_sent, roll_failed = load.sent, len(load.failures)

        victim, pid = c.http.get("/serve/roll/pid").text.split()
        with Load(c.url, c.key, "/serve/roll/", rate=50) as load:
            time.sleep(2)
            os.kill(int(pid), signal.SIGKILL)
            t0 = time.monotonic()
            while any(r["session_id"] == victim for r in in_traffic(get(c.http, "roll"))):
                time.sleep(0.02)
            left = time.monotonic() - t0
            ready(c.http, "roll", 3, timeout=120)
            back = time.monotonic() - t0
            time.sleep(1)
        kill_sent, kill_failed = load.sent, len(load.failures)

    print(machine(url))
    dp, pp = pct(d_lat, 0.5) * 1000, pct(p_lat, 0.5) * 1000
    d95, p95 = pct(d_lat, 0.95) * 1000, pct(p_lat, 0.95) * 1000
    print(f"latency, {args.n} sequential GETs each way: direct p50 {dp:.2f} ms p95 {d95:.2f} ms;", end="")
    print(f" /serve p50 {pp:.2f} ms p95 {p95:.2f} ms; added p50 {pp - dp:.2f} ms (bar 2 ms)")
    print(
        f"throughput, {args.conns} connections for {args.seconds:g} s: direct {d_rate['rate']:.0f}/s,", end=""
    )
    print(f" /serve {p_rate['rate']:.0f}/s (bar 1000/s; {p_rate['bad']:.0f} not 200);", end="")
    print(f" manager CPU per proxied request {per_request * 1000:.2f} ms")
    print(
        f"rolling update of 3 replicas under 50 req/s: {roll_failed} of {roll_sent} failed (bar 0),", end=""
    )
    print(f" done in {rolled:.1f} s")
    print(
        f"SIGKILL of one replica under 50 req/s: {kill_failed} of {kill_sent} failed; out of traffic after",
        end="",
    )
    print(f" {left:.2f} s, 3 HEALTHY again after {back:.1f} s")


if __name__ == "__main__":
    main()
