"""The deployment pages through the real app (in-process, SQLite, no loops: the deployments stay
as created): the list with desired against ready, a deployment's reachability banner and routes,
scaling by form (CSRF checked, bad numbers named), and another project's deployment a 404."""

from __future__ import annotations

import httpx

from tests.unit.web.conftest import KEY, URL, Site, csrf_of, signed_in

BODY = {"name": "web-echo", "replicas": 2, "session": {"command": ["python3", "-m", "http.server"]}}


def test_the_list_and_the_page_say_what_is_asked_and_what_is_reachable(site: Site) -> None:
    assert site.api.post("/api/v1/deployments", json=BODY).status_code == 201
    browser = signed_in(site.transport, KEY)
    listed = browser.get("/ui/deployments")
    assert listed.status_code == 200 and 'data-deployment="web-echo"' in listed.text
    assert "0 / 2" in listed.text  # ready / desired
    shown = browser.get("/ui/deployments/web-echo")
    assert shown.status_code == 200 and "Reachable: <strong>no</strong>" in shown.text
    assert "answers 503" in shown.text and "PENDING" in shown.text
    assert 'sse-connect="/api/v1/events/stream?project=default' in shown.text
    live = browser.get("/ui/deployments/web-echo", params={"block": "live"}, headers={"HX-Request": "true"})
    assert live.status_code == 200 and "<html" not in live.text and 'id="reachable"' in live.text


def test_scaling_by_form_checks_csrf_and_the_number(site: Site) -> None:
    assert site.api.post("/api/v1/deployments", json={**BODY, "name": "web-scale"}).status_code == 201
    browser = signed_in(site.transport, KEY)
    csrf = csrf_of(browser.get("/ui/deployments/web-scale").text)
    forged = browser.post("/ui/deployments/web-scale/scale", data={"replicas": "3", "csrf_token": "x"})
    assert forged.status_code == 403
    for bad in ("-1", "101", "two", ""):
        got = browser.post("/ui/deployments/web-scale/scale", data={"replicas": bad, "csrf_token": csrf})
        assert got.status_code == 422 and "replicas" in got.text, bad
    assert site.api.get("/api/v1/deployments/web-scale").json()["replicas"] == 2
    done = browser.post("/ui/deployments/web-scale/scale", data={"replicas": "5", "csrf_token": csrf})
    assert done.status_code == 303 and done.headers["location"].endswith("?done=scaled")
    assert site.api.get("/api/v1/deployments/web-scale").json()["replicas"] == 5


def test_another_projects_deployment_is_not_there(site: Site) -> None:
    key = site.user("web-dep-eve", "web-dep-eve")
    assert site.api.post("/api/v1/deployments", json={**BODY, "name": "web-admins"}).status_code == 201
    eve = signed_in(site.transport, key)
    assert "web-admins" not in eve.get("/ui/deployments").text
    assert eve.get("/ui/deployments/web-admins").status_code == 404
    csrf = csrf_of(eve.get("/ui/deployments").text)
    gone = eve.post("/ui/deployments/web-admins/delete", data={"csrf_token": csrf})
    assert gone.status_code == 404
    admin = httpx.Client(transport=site.transport, base_url=URL, headers={"Authorization": f"Bearer {KEY}"})
    assert admin.get("/api/v1/deployments/web-admins").json()["deleting"] is False
