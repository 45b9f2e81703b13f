"""The web UI in a real Chromium against a real `corral up`: a person signs in, watches a flaky
session's chain grow to success without reloading, reads a gang's root cause, and cancels; every
page visited has no critical or serious axe-core violation.  Screenshots go to the test's temp dir."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.browser import browser as browser  # the fixture
from tests.support.browser import serious_violations
from tests.support.embedded import Up

pytestmark = pytest.mark.browser
GANG = """import os, time
rank = int(os.environ["CORRAL_CLUSTER_RANK"])
if rank == 1:
    raise ValueError("bad batch at step 2")
time.sleep(30)
"""


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    u = Up(tmp_path_factory.mktemp("web-up"))
    try:
        yield u
    finally:
        u.close()


@pytest.fixture
def page(browser: Any, up: Up, tmp_path: Path) -> Iterator[Any]:
    context = browser.new_context(base_url=up.url)
    p = context.new_page()
    p.set_default_timeout(30_000)
    p.goto("/ui/sessions")
    no_violations(p)  # the sign-in page
    p.get_by_label("API key").fill(up.key)
    p.get_by_role("button", name="Sign in").click()
    p.wait_for_url("**/ui/sessions")
    try:
        yield p
    finally:
        p.screenshot(path=str(tmp_path / "last.png"), full_page=True)
        context.close()


def submit(up: Up, **body: Any) -> dict[str, Any]:
    made = httpx.post(
        f"{up.url}/api/v1/sessions", json=body, headers={"Authorization": f"Bearer {up.key}"}, timeout=30
    )
    assert made.status_code == 201, made.text
    return dict(made.json())


def no_violations(page: Any) -> None:
    found = serious_violations(page)
    assert not found, found


def test_signing_in_shows_the_sessions_and_the_pages_pass_axe(page: Any, up: Up, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    made = submit(up, command=["true"], name="hello-web")
    page.reload()
    expect(page.get_by_role("link", name="hello-web")).to_be_visible()
    no_violations(page)
    page.screenshot(path=str(tmp_path / "sessions.png"), full_page=True)
    page.get_by_role("link", name="hello-web").click()
    expect(page.locator("#status")).to_have_text("TERMINATED")
    no_violations(page)
    page.goto("/ui/agents")
    expect(page.locator("#agents tbody tr")).to_have_count(2)
    no_violations(page)
    arr = submit(up, command=["true"], array="0-5")
    for path in (f"/ui/arrays/{arr['array_id']}", "/ui/queue/default", "/ui/submit", "/ui/admin/policies",
                 "/ui/admin/groups", "/ui/admin/users", "/ui/admin/audit"):  # fmt: skip
        page.goto(path)
        expect(page.locator("h1")).to_be_visible()
        no_violations(page)
        shot = path.strip("/").replace("/", "-")[:40] + ".png"
        page.screenshot(path=str(tmp_path / shot), full_page=True)
    page.goto(f"/ui/arrays/{arr['array_id']}")
    expect(page.locator("#progress")).to_contain_text("6 of 6 succeeded", timeout=60_000)
    page.goto("/ui/sessions/no-such-session")
    expect(page.locator("h1")).to_contain_text("no session")
    no_violations(page)
    page.goto("/ui/login?next=/ui/agents")  # signed in already: straight on
    expect(page).to_have_url(f"{up.url}/ui/agents")
    assert made["id"]


def test_a_flaky_session_from_the_form_grows_its_chain_to_success_without_reloading(
    page: Any, up: Up, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page.goto("/ui/submit")
    no_violations(page)
    page.get_by_label("Command").fill("""sh -c '[ "$CORRAL_ATTEMPT" -ge 3 ] || exit 3'""")
    page.get_by_label("Name", exact=True).fill("flaky")
    page.get_by_label("Retries after a failure").fill("3")
    page.get_by_label("Delay before a retry").fill("1s")
    page.get_by_role("button", name="Submit").click()
    expect(page.get_by_role("status")).to_contain_text("Submitted")
    page.evaluate("window.__same_page = true")  # a reload would lose it
    chain = page.locator("#chain li")
    expect(chain).to_have_count(3, timeout=60_000)
    expect(chain.nth(2)).to_contain_text("TERMINATED", timeout=60_000)
    expect(chain.nth(0)).to_contain_text("exit 3")
    expect(chain.nth(1)).to_contain_text("a retry after")
    assert page.evaluate("window.__same_page") is True
    page.screenshot(path=str(tmp_path / "chain.png"), full_page=True)
    no_violations(page)


def test_a_user_whose_rules_fix_the_priority_finds_the_field_locked(browser: Any, up: Up) -> None:
    from playwright.sync_api import expect

    assert up.corral("project", "create", "locked").returncode == 0
    rules = up.corral(
        "project", "update", "locked", "--priority-rules", '{"default": 15, "may_change": false}'
    )
    assert rules.returncode == 0, rules.stderr
    made = up.corral("user", "create", "lee", "--project", "locked", "-o", "json")
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)["key"]["key"]
    context = browser.new_context(base_url=up.url)
    try:
        p = context.new_page()
        p.goto("/ui/submit")
        p.get_by_label("API key").fill(key)
        p.get_by_role("button", name="Sign in").click()
        field = p.locator("#priority")
        expect(field).to_be_disabled()
        expect(field).to_have_value("15")
        no_violations(p)
    finally:
        context.close()


def test_a_gangs_root_cause_panel_names_the_rank_that_raised(page: Any, up: Up, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    gang = submit(up, name="gang", command=["python3", "-c", GANG], cluster_size=3)
    page.goto(f"/ui/sessions/{gang['id']}")
    panel = page.locator("#root-cause")
    expect(panel).to_contain_text("rank 1", timeout=60_000)
    expect(panel).to_contain_text("ValueError")
    expect(panel).to_contain_text("bad batch at step 2")
    expect(panel.locator(".others")).to_contain_text("side effect")
    page.screenshot(path=str(tmp_path / "root-cause.png"), full_page=True)
    no_violations(page)


def test_cancel_from_the_page(page: Any, up: Up) -> None:
    from playwright.sync_api import expect

    long = submit(up, name="long", command=["sleep", "300"])
    page.goto(f"/ui/sessions/{long['id']}")
    expect(page.locator("#status")).to_have_text("RUNNING", timeout=60_000)
    page.get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("status")).to_contain_text("Cancel requested")
    expect(page.locator("#status")).to_have_text("TERMINATED", timeout=60_000)  # live, no reload
    expect(page.locator(".facts")).to_contain_text("user_cancelled")
    expect(page.get_by_role("button", name="Cancel")).to_have_count(0)  # nothing left to stop


def test_a_waiting_session_shows_its_place_and_an_infeasible_one_says_so(page: Any, up: Up) -> None:
    from playwright.sync_api import expect

    agents = up.get("/api/v1/agents")
    cores, largest = sum(a["capacity"]["cpu"] for a in agents), max(a["capacity"]["cpu"] for a in agents)
    size = int(cores // largest) + 1  # each kernel fits an agent; the gang, all of them together, not
    huge = submit(up, name="huge", command=["true"], resources={"cpu": largest}, cluster_size=size)
    page.goto(f"/ui/sessions/{huge['id']}")
    expect(page.locator("#waiting")).to_contain_text("Infeasible")
    expect(page.locator("#waiting")).to_contain_text(f"the {size} kernels need more than all")
    fillers = [
        submit(up, name="filler", command=["sleep", "300"], resources={"cpu": 1}) for _ in range(int(cores))
    ]
    late = submit(up, name="late", command=["true"], resources={"cpu": 1})
    try:
        page.goto(f"/ui/sessions/{late['id']}")
        expect(page.locator("#waiting")).to_contain_text("Queue position")
        expect(page.locator("#waiting")).not_to_contain_text("Infeasible")
        no_violations(page)
    finally:
        for s in [huge, late, *fillers]:
            httpx.post(
                f"{up.url}/api/v1/sessions/{s['id']}/cancel", headers={"Authorization": f"Bearer {up.key}"}
            )


def test_a_preemption_is_seen_from_both_sides(page: Any, up: Up) -> None:
    from playwright.sync_api import expect

    assert up.corral("rg", "set", "default", "grace_period=0", "min_runtime=0").returncode == 0
    agents = up.get("/api/v1/agents")
    cores = sum(int(a["capacity"]["cpu"]) for a in agents)
    per_agent = min(int(a["capacity"]["cpu"]) for a in agents)
    low = [submit(up, name=f"low-{i}", command=["sleep", "300"], priority=1) for i in range(cores)]
    for s in low:
        page.goto(f"/ui/sessions/{s['id']}")
        expect(page.locator("#status")).to_have_text("RUNNING", timeout=60_000)
    urgent = submit(up, name="urgent", command=["sleep", "300"], priority=50, resources={"cpu": per_agent})
    try:
        page.goto(f"/ui/sessions/{urgent['id']}")
        expect(page.locator("#victims li")).to_have_count(per_agent, timeout=60_000)
        victim = page.locator("#victims li a").first
        victim.click()
        expect(page.locator("#preemption")).to_contain_text("Preempted by", timeout=30_000)
        expect(page.locator("#preemption")).to_contain_text(urgent["id"][:8])
        expect(page.locator("#preemption")).to_contain_text("terminate")
        no_violations(page)
    finally:
        for s in [urgent, *low]:
            httpx.post(
                f"{up.url}/api/v1/sessions/{s['id']}/cancel", headers={"Authorization": f"Bearer {up.key}"}
            )


def test_logs_follow_a_running_kernel_and_stay_after_it_ends(page: Any, up: Up, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    gate = tmp_path / "go"
    tmp_path.chmod(0o777)
    script = f"echo first line; while [ ! -e {gate} ]; do sleep 0.1; done; echo second line"
    s = submit(up, name="talker", command=["sh", "-c", script])
    page.goto(f"/ui/sessions/{s['id']}")
    log = page.get_by_role("log")
    expect(log).to_contain_text("first line", timeout=60_000)
    expect(log).not_to_contain_text("second line")
    gate.touch()
    expect(log).to_contain_text("second line", timeout=30_000)  # no reload
    expect(page.locator("#status")).to_have_text("TERMINATED", timeout=30_000)
    page.reload()
    expect(page.get_by_role("log")).to_contain_text("first line\nsecond line")


def test_a_failed_session_is_retried_by_hand_from_its_page(page: Any, up: Up) -> None:
    from playwright.sync_api import expect

    failed = submit(up, name="once", command=["sh", "-c", '[ "$CORRAL_ATTEMPT" -ge 2 ] || exit 4'])
    page.goto(f"/ui/sessions/{failed['id']}")
    expect(page.locator("#status")).to_have_text("ERROR", timeout=60_000)
    page.get_by_role("button", name="Retry").click()
    expect(page.get_by_role("status")).to_contain_text("Retry made")
    expect(page.locator("#chain li")).to_have_count(2)
    expect(page.locator("#chain li").nth(1)).to_contain_text("a manual retry")
    expect(page.locator("#status")).to_have_text("TERMINATED", timeout=60_000)


def test_a_deployment_page_turns_reachable_without_reloading(page: Any, up: Up, tmp_path: Path) -> None:
    from tests.support.deployments import replica_session

    body = {"name": "web-e2e", "replicas": 1, "session": replica_session(), "health": {"interval": 0.5}}
    headers = {"Authorization": f"Bearer {up.key}"}
    made = httpx.post(f"{up.url}/api/v1/deployments", json=body, headers=headers, timeout=30)
    assert made.status_code == 201, made.text
    page.goto("/ui/deployments/web-e2e")
    banner = page.locator("#reachable")
    banner.get_by_text("yes").wait_for(timeout=60_000)  # live: no reload
    assert "1 replica in traffic" in banner.inner_text()
    assert page.locator("#routes").get_by_text("HEALTHY").count() == 1
    page.screenshot(path=str(tmp_path / "deployment.png"), full_page=True)
    no_violations(page)
    page.goto("/ui/deployments")
    no_violations(page)
    page.goto("/ui/deployments/web-e2e")
    page.get_by_label("Replicas").fill("0")
    page.get_by_role("button", name="Scale").click()
    page.get_by_text("Scale requested").wait_for()
    page.locator("#reachable").get_by_text("no", exact=True).wait_for(timeout=60_000)
    httpx.delete(f"{up.url}/api/v1/deployments/web-e2e", headers=headers, timeout=30)
