"""Sign-ins across managers, on PostgreSQL: a cookie one manager made is honoured by another (the
signing key and the sign-in live in the database), and signing out on one ends it on both."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx
import pytest

from tests.support.cluster import Cluster

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def _csrf(html: str) -> str:
    found = CSRF.search(html)
    assert found, html[:300]
    return found.group(1)


@pytest.mark.parametrize("own_cluster", ["postgres"], indirect=True)
def test_a_sign_in_holds_on_every_manager_and_ends_on_every_one(own_cluster: Callable[..., Cluster]) -> None:
    first = own_cluster()
    second = Cluster(first.database_url, first.workdir.parent / "second")
    second.key = first.key
    second.http.headers["Authorization"] = f"Bearer {first.key}"
    try:
        second.start_manager()
        with httpx.Client(base_url=first.url, timeout=30) as here:
            form = here.get("/ui/login").text
            done = here.post("/ui/login", data={"api_key": first.key, "csrf_token": _csrf(form)})
            assert done.status_code == 303, done.text[:300]
            cookie = here.cookies["corral_session"]
            with httpx.Client(base_url=second.url, cookies={"corral_session": cookie}, timeout=30) as there:
                page = there.get("/ui/sessions")
                assert page.status_code == 200 and "Sign out" in page.text
                assert there.get("/api/v1/sessions").status_code == 200  # the API's reads take it too
                out = there.post("/ui/logout", data={"csrf_token": _csrf(page.text)})
                assert out.status_code == 303
            assert here.get("/ui/sessions").status_code == 303  # ended on the first manager too
            assert here.get("/api/v1/sessions").status_code == 401
        with httpx.Client(base_url=first.url, cookies={"corral_session": cookie[:-2] + "xx"}) as forged:
            assert forged.get("/ui/sessions").status_code == 303
    finally:
        second.close()
