"""/ui/submit: the form validated as the API validates, the priority field locked or bounded by the
caller's rules with their default filled in, a refused form named and kept filled in."""

from __future__ import annotations

import re

from tests.unit.web.conftest import KEY, Site, csrf_of, signed_in


def _post(browser, page_html: str, **fields: str):  # type: ignore[no-untyped-def]
    return browser.post("/ui/submit", data={"csrf_token": csrf_of(page_html), **fields})


def test_a_submitted_form_makes_the_session_the_api_would(site: Site) -> None:
    browser = signed_in(site.transport, KEY)
    form = browser.get("/ui/submit")
    assert form.status_code == 200
    done = _post(browser, form.text, command="python3 -c 'print(42)'", name="from-form", cpu="0.5",
                 cluster_size="2", max_retries="2", retry_delay="5s", priority="20")  # fmt: skip
    assert done.status_code == 303, done.text[:500]
    session_id = re.search(r"/ui/sessions/([0-9a-f-]{36})", done.headers["location"]).group(1)  # type: ignore[union-attr]
    s = site.api.get(f"/api/v1/sessions/{session_id}").json()
    assert s["command"] == ["python3", "-c", "print(42)"] and s["name"] == "from-form"
    assert (s["resources"]["cpu"], s["cluster_size"], s["priority"]) == (0.5, 2, 20)
    assert s["retry_policy"]["max_retries"] == 2 and s["retry_policy"]["retry_delay"] == 5.0


def test_every_inline_retry_field_reaches_the_policy(site: Site) -> None:
    browser = signed_in(site.transport, KEY)
    form = browser.get("/ui/submit").text
    assert 'name="eligible_causes"' in form and "user_cancelled" not in form  # never retriable
    done = browser.post(
        "/ui/submit",
        data={"csrf_token": csrf_of(form), "command": "true", "max_retries": "3", "backoff": "exponential",
              "backoff_multiplier": "3", "max_retry_delay": "2m", "jitter": "random", "jitter_ratio": "0.5",
              "anti_affinity": "node", "max_retry_duration": "1h",
              "eligible_causes": ["kernel_nonzero_exit", "oom_killed"]},
    )  # fmt: skip
    assert done.status_code == 303, done.text[:400]
    [s] = site.api.get("/api/v1/sessions").json()
    p = s["retry_policy"]
    assert (p["backoff"], p["backoff_multiplier"], p["max_retry_delay"]) == ("exponential", 3.0, 120.0)
    assert (p["jitter"], p["jitter_ratio"], p["anti_affinity"], p["max_retry_duration"]) == (
        "random",
        0.5,
        "node",
        3600.0,
    )
    assert sorted(p["eligible_causes"]) == ["kernel_nonzero_exit", "oom_killed"]


def test_a_refused_form_names_the_field_and_keeps_what_was_typed(site: Site) -> None:
    browser = signed_in(site.transport, KEY)
    form = browser.get("/ui/submit").text
    for fields, named in (
        ({"command": "true", "cpu": "-1"}, "resources"),
        ({"command": "true", "cluster_size": "999"}, "cluster_size"),
        ({"command": "echo 'unclosed"}, "command"),
        ({"command": ""}, "command"),
        ({"command": "true", "max_retries": "lots"}, "max_retries"),
    ):
        got = _post(browser, form, name="kept-name", **fields)
        assert got.status_code in (400, 403, 422) and named in got.text, (fields, got.text[:300])
        assert 'value="kept-name"' in got.text
    assert site.api.get("/api/v1/sessions").json() == []  # nothing half-made


def test_a_user_who_may_not_change_the_priority_finds_it_locked_at_the_default(site: Site) -> None:
    key = site.user("dana", "d-proj")
    rules = {"priority_rules": {"default": 15, "may_change": False}}
    assert site.api.patch("/api/v1/projects/d-proj", json=rules).status_code == 200
    browser = signed_in(site.transport, key)
    form = browser.get("/ui/submit").text
    field = re.search(r'<input id="priority"[^>]*>', form).group(0)  # type: ignore[union-attr]
    assert "disabled" in field and 'value="15"' in field and 'name="priority"' not in field
    sneaked = _post(browser, form, command="true", project="d-proj", priority="90")
    assert sneaked.status_code == 303  # a locked value sent anyway is dropped: the default applies
    [made] = site.api.get("/api/v1/sessions").json()
    assert made["priority"] == 15


def test_an_allowed_range_bounds_the_field_and_the_api_refuses_outside_it(site: Site) -> None:
    key = site.user("erin", "e-proj")
    rules = {"priority_rules": {"default": 30, "may_change": True, "min": 20, "max": 40}}
    assert site.api.patch("/api/v1/projects/e-proj", json=rules).status_code == 200
    browser = signed_in(site.transport, key)
    form = browser.get("/ui/submit").text
    field = re.search(r'<input id="priority"[^>]*>', form).group(0)  # type: ignore[union-attr]
    assert 'min="20"' in field and 'max="40"' in field and 'value="30"' in field
    refused = _post(browser, form, command="true", project="e-proj", priority="50")
    assert refused.status_code == 422 and "priority" in refused.text
