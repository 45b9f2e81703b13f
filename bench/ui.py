"""The web UI's speed with N sessions in the database: as a member of one project (of ten), the
median of 100 warm requests for the sessions list's first page, a filtered page, and a session
page with a 10-attempt chain of 64 kernels each; and, in Chromium (Playwright), how long after a
status change's event is created (its `created_at`, this host's clock) the open list shows it.
Beside them, in the same run: the JSON API's GET /sessions?limit=50 for the same member.

    .venv/bin/python bench/ui.py [--n 100000] [--postgres]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench.common import add_database_options, database, machine, pct, scratch
from tests.support.browser import ARGS, chromium
from tests.support.cluster import Cluster, poll

PROJECTS = 10
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
OBSERVE = """() => {
  window.__seen = {};
  new MutationObserver(() => {
    for (const tr of document.querySelectorAll('tr[data-session]')) {
      if (tr.textContent.includes('CANCELLED') && !(tr.dataset.session in window.__seen)) {
        window.__seen[tr.dataset.session] = Date.now();
      }
    }
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def seed(c: Cluster, n: int) -> None:
    """`n` sessions spread over the projects, waiting in a group with no agent (they stay)."""
    for p in range(PROJECTS):
        assert c.http.post("/api/v1/projects", json={"name": f"p{p}"}).status_code == 201
    t0 = time.monotonic()
    for start in range(0, n, 100):
        body = {
            "sessions": [
                {"command": ["true"], "project": f"p{i % PROJECTS}", "name": f"s{i}"}
                for i in range(start, min(n, start + 100))
            ]
        }
        resp = c.http.post("/api/v1/sessions/bulk", json=body, timeout=120)
        assert resp.status_code == 201, resp.text
    print(f"seeded {n} sessions in {time.monotonic() - t0:.0f} s", file=sys.stderr)


def chain(c: Cluster) -> str:
    """A session of 64 kernels failing 10 times (9 retries): the page of its last attempt."""
    c.start_agent("wide", cpu=64, mem="64G", resource_group="wide")
    s = c.submit(
        command=["false"],
        cluster_size=64,
        resource_group="wide",
        project="p0",
        retry_policy={"max_retries": 9, "retry_delay": 0},
    )

    def last() -> str | None:
        attempts = c.http.get(f"/api/v1/sessions/{s['id']}/attempts").json()
        done = len(attempts) == 10 and attempts[-1]["status"] in ("TERMINATED", "ERROR")
        return str(attempts[-1]["id"]) if done else None

    return str(poll(last, 900, "the 10-attempt chain to end", interval=1))


def signed_in(url: str, key: str) -> httpx.Client:
    browser = httpx.Client(base_url=url, timeout=60)
    form = browser.get("/ui/login").text
    token = CSRF.search(form).group(1)  # type: ignore[union-attr]
    done = browser.post("/ui/login", data={"api_key": key, "csrf_token": token})
    assert done.status_code == 303, done.text
    return browser


def median_ms(http: httpx.Client, path: str, runs: int = 100, **kw: Any) -> float:
    for _ in range(5):
        assert http.get(path, **kw).status_code == 200
    took = []
    for _ in range(runs):
        t0 = time.perf_counter()
        resp = http.get(path, **kw)
        took.append(time.perf_counter() - t0)
        assert resp.status_code == 200, resp.text[:300]
    return statistics.median(took) * 1000


def live_lags(c: Cluster, key: str, probes: int) -> list[float]:
    """Seconds from each cancellation's event to the open list showing it, in Chromium."""
    from playwright.sync_api import sync_playwright

    made = [c.submit(command=["true"], project="p0", name=f"probe-{i}")["id"] for i in range(probes)]
    lags = []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium(), headless=True, args=ARGS)
        page = b.new_page(base_url=c.url)
        page.goto("/ui/sessions")
        page.fill("#api_key", key)
        page.click("button[type=submit]")
        page.wait_for_url("**/ui/sessions")
        page.wait_for_selector(f'tr[data-session="{made[0]}"]')
        page.evaluate(OBSERVE)
        page.wait_for_timeout(1000)  # the event stream connects
        for sid in made:
            assert c.http.post(f"/api/v1/sessions/{sid}/cancel").status_code == 202
            seen = poll(lambda s=sid: page.evaluate(f"window.__seen['{s}']"), 30, "the row to change", 0.01)
            events = c.http.get("/api/v1/events", params={"session": sid}).json()
            created = next(
                datetime.fromisoformat(e["created_at"]).timestamp()
                for e in events
                if e["to_status"] == "CANCELLED"
            )
            lags.append(seen / 1000 - created)
        b.close()
    return sorted(lags)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--probes", type=int, default=20)
    add_database_options(parser)
    args = parser.parse_args()
    with ExitStack() as stack:
        work = scratch("corral-bench-ui-", stack)
        url = stack.enter_context(database(args, work))
        c = Cluster(url, work)
        stack.callback(c.close)
        c.start_manager()
        seed(c, args.n)
        last = chain(c)
        made = c.http.post("/api/v1/users", json={"name": "member", "role": "user", "projects": ["p0"]})
        key = made.json()["key"]["key"]
        web = signed_in(c.url, key)
        api = httpx.Client(base_url=c.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        first = median_ms(web, "/ui/sessions")
        filtered = median_ms(web, "/ui/sessions", params={"status": "PENDING", "q": "s1"})
        session = median_ms(web, f"/ui/sessions/{last}")
        peer = median_ms(api, "/api/v1/sessions", params={"limit": 50})
        lags = live_lags(c, key, args.probes)
    print(machine(url))
    print(f"{args.n} sessions in {PROJECTS} projects, as a member of one; page of 50, median of 100:")
    print(f"  sessions list, first page   {first:6.1f} ms (bar 100)")
    print(f"  filtered (PENDING, 's1…')   {filtered:6.1f} ms (bar 100)")
    print(f"  session, 10 attempts x 64   {session:6.1f} ms (bar 100)")
    print(f"  peer: GET /api/v1/sessions  {peer:6.1f} ms (list page / API {first / peer:.2f}x)")
    p50, p95 = pct(lags, 0.5) * 1000, pct(lags, 0.95) * 1000
    print(f"status change -> on the open list (Chromium, {len(lags)}):", end="")
    print(f" p50 {p50:.0f} ms  p95 {p95:.0f} ms (bar p50 500)")


if __name__ == "__main__":
    main()
