"""The web UI's pages through the real app (in-process, SQLite): signing in and out, CSRF on every
form, keyset pages, bad filters named, and a user never seeing another project's session."""

from __future__ import annotations

import re

import httpx

from tests.unit.web.conftest import KEY, URL, Site, csrf_of, signed_in

ROW = re.compile(r'data-session="([0-9a-f-]{36})"')


def test_signing_in_sets_a_strict_http_only_cookie_and_signing_out_ends_it(site: Site) -> None:
    browser = signed_in(site.transport, KEY)
    cookie = next(c for c in browser.cookies.jar if c.name == "corral_session")
    kept = cookie.value
    assert cookie.has_nonstandard_attr("HttpOnly") and cookie.get_nonstandard_attr("SameSite") == "strict"
    listed = browser.get("/ui/sessions")
    assert listed.status_code == 200 and "Sign out" in listed.text
    out = browser.post("/ui/logout", data={"csrf_token": csrf_of(listed.text)})
    assert out.status_code == 303 and out.headers["location"] == "/ui/login"
    replay = httpx.Client(transport=site.transport, base_url=URL, cookies={"corral_session": kept})
    again = replay.get("/ui/sessions")
    assert again.status_code == 303 and again.headers["location"].startswith("/ui/login")


def test_a_page_asked_for_signed_out_comes_back_after_signing_in(site: Site) -> None:
    browser = httpx.Client(transport=site.transport, base_url=URL)
    asked = browser.get("/ui/agents")
    assert asked.status_code == 303 and asked.headers["location"] == "/ui/login?next=/ui/agents"
    form = browser.get(asked.headers["location"])
    done = browser.post(
        "/ui/login", data={"api_key": KEY, "csrf_token": csrf_of(form.text), "next": "/ui/agents"}
    )
    assert done.headers["location"] == "/ui/agents"


def test_sign_in_refuses_a_bad_key_a_stale_form_and_a_way_off_the_site(site: Site) -> None:
    browser = httpx.Client(transport=site.transport, base_url=URL)
    form = browser.get("/ui/login")
    bad = browser.post("/ui/login", data={"api_key": "crl_nobody", "csrf_token": csrf_of(form.text)})
    assert (
        bad.status_code == 401
        and "api_key" in bad.text
        and "corral_session" not in bad.headers.get("set-cookie", "")
    )
    stranger = httpx.Client(transport=site.transport, base_url=URL)  # no login-form cookie: forged
    forged = stranger.post("/ui/login", data={"api_key": KEY, "csrf_token": csrf_of(form.text)})
    assert forged.status_code == 403 and "csrf_token" in forged.text
    for away in ("https://evil.example/", "//evil.example/ui/", "/api/v1/sessions", "/ui/\\evil"):
        form = browser.get("/ui/login")
        done = browser.post(
            "/ui/login", data={"api_key": KEY, "csrf_token": csrf_of(form.text), "next": away}
        )
        assert done.headers["location"] == "/ui/sessions", away
        browser.cookies.clear()


def test_a_revoked_key_ends_its_sign_in(site: Site) -> None:
    key = site.user("carol", "c-proj")
    browser = signed_in(site.transport, key)
    assert browser.get("/ui/sessions").status_code == 200
    [kept] = site.api.get("/api/v1/users/carol/keys").json()
    assert site.api.delete(f"/api/v1/users/carol/keys/{kept['id']}").status_code == 204
    assert browser.get("/ui/sessions").status_code == 303


def test_a_user_never_sees_another_projects_session(site: Site) -> None:
    alice, bob = site.user("alice", "a-proj"), site.user("bob", "b-proj")
    hers = site.submit(alice, name="alices-job", project="a-proj")
    his = site.submit(bob, name="bobs-job", project="b-proj")
    as_alice = signed_in(site.transport, alice)
    listed = as_alice.get("/ui/sessions").text
    assert hers["id"] in listed and his["id"] not in listed and "bobs-job" not in listed
    for query in ({"q": his["id"][:8]}, {"q": "bobs"}, {"project": "b-proj"}, {"owner": "bob"}):
        found = as_alice.get("/ui/sessions", params=query)
        assert found.status_code == 200 and his["id"] not in found.text, query
    page = as_alice.get(f"/ui/sessions/{his['id']}")
    assert page.status_code == 404 and "bobs-job" not in page.text
    assert as_alice.get(f"/ui/sessions/{his['id']}", params={"block": "live"}).status_code == 404
    own = as_alice.get(f"/ui/sessions/{hers['id']}")
    assert own.status_code == 200 and "alices-job" in own.text and 'id="chain"' in own.text
    admin = signed_in(site.transport, KEY).get("/ui/sessions").text
    assert hers["id"] in admin and his["id"] in admin


def test_the_api_takes_the_cookie_for_reads_only(site: Site) -> None:
    browser = signed_in(site.transport, KEY)
    assert browser.get("/api/v1/sessions").status_code == 200
    write = browser.post("/api/v1/sessions", json={"command": ["true"]})
    assert write.status_code == 401 and write.json()["error"]["details"]["field"] == "authorization"


def test_an_action_needs_its_forms_csrf_token(site: Site) -> None:
    made = site.submit(KEY, name="to-cancel")
    browser = signed_in(site.transport, KEY)
    page = browser.get(f"/ui/sessions/{made['id']}")
    refused = browser.post(f"/ui/sessions/{made['id']}/cancel", data={"csrf_token": "wrong"})
    assert refused.status_code == 403 and "csrf_token" in refused.text
    assert site.api.get(f"/api/v1/sessions/{made['id']}").json()["termination_reason"] is None
    done = browser.post(f"/ui/sessions/{made['id']}/cancel", data={"csrf_token": csrf_of(page.text)})
    assert done.status_code == 303 and done.headers["location"].startswith(f"/ui/sessions/{made['id']}?done=")
    assert site.api.get(f"/api/v1/sessions/{made['id']}").json()["termination_reason"] == "user_cancelled"
    shown = browser.get(done.headers["location"])
    assert "Cancel requested" in shown.text


def test_pages_of_fifty_follow_one_another_with_no_session_twice(site: Site) -> None:
    body = {"sessions": [{"command": ["true"], "name": f"s{i}"} for i in range(120)]}
    assert site.api.post("/api/v1/sessions/bulk", json=body).status_code == 201
    browser = signed_in(site.transport, KEY)
    seen: list[str] = []
    url: str | None = "/ui/sessions"
    while url:
        got = browser.get(url)
        assert got.status_code == 200
        ids = ROW.findall(got.text)
        assert len(ids) <= 50
        seen += ids
        older = re.search(r'rel="next" href="([^"]+)"', got.text)
        url = older.group(1).replace("&amp;", "&") if older else None
    assert len(seen) == 120 == len(set(seen))
    rows = browser.get("/ui/sessions", params={"block": "rows"}).text
    assert "<html" not in rows and len(ROW.findall(rows)) == 50


def test_bad_filters_are_refused_naming_the_field(site: Site) -> None:
    browser = signed_in(site.transport, KEY)
    for params, field in (({"status": "NOPE"}, "status"), ({"before": "garbage"}, "before")):
        got = browser.get("/ui/sessions", params=params)
        assert got.status_code == 422 and f"<code>{field}</code>" in got.text, got.text[:400]


def test_the_root_redirects_to_the_sessions(site: Site) -> None:
    browser = httpx.Client(transport=site.transport, base_url=URL)
    assert browser.get("/").headers["location"] == "/ui/sessions"
    assert browser.get("/ui/").headers["location"] == "/ui/sessions"


def test_a_bad_cursor_or_rank_is_a_named_refusal_not_a_server_error(site: Site) -> None:
    made = site.submit(KEY, name="one")
    browser = signed_in(site.transport, KEY)
    far = browser.get("/ui/sessions", params={"before": "0001-01-01T00:00:00+01:00~x"})
    assert far.status_code == 422 and "<code>before</code>" in far.text
    rank = browser.get(f"/ui/sessions/{made['id']}", params={"rank": 7})
    assert rank.status_code == 422 and "<code>rank</code>" in rank.text
    typed = browser.get(f"/ui/sessions/{made['id']}", params={"rank": "x"})
    assert typed.status_code == 422 and "<html" in typed.text  # a page, not the API's JSON


def test_an_expired_sign_in_sends_an_htmx_refresh_to_the_whole_sign_in_page(site: Site) -> None:
    browser = httpx.Client(transport=site.transport, base_url=URL)
    got = browser.get(
        "/ui/sessions", params={"block": "rows", "status": "PENDING"}, headers={"HX-Request": "true"}
    )
    assert (
        got.status_code == 200
        and got.headers["HX-Redirect"] == "/ui/login?next=/ui/sessions%3Fstatus%3DPENDING"
    )
    assert got.text == ""
