"""Random input to every page, through the real app: never a 5xx or a traceback, whatever the query,
the path or the form holds (the pages are kept out of /openapi.json, so the API's fuzz skips them)."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.web.conftest import KEY, Site, csrf_of, signed_in

TEXT = st.text(st.characters(codec="utf-8"), max_size=300)
FIELDS = ["command", "name", "project", "cpu", "mem", "gpu", "cluster_size", "priority", "max_retries",
          "retry_delay", "backoff", "backoff_multiplier", "max_retry_delay", "jitter", "jitter_ratio",
          "anti_affinity", "max_retry_duration", "eligible_causes", "retry_policies"]  # fmt: skip
PAGES = ["/ui/sessions", "/ui/sessions/x", "/ui/arrays/x", "/ui/queue/default", "/ui/agents", "/ui/submit",
         "/ui/admin/audit", "/ui/login", "/ui/deployments", "/ui/deployments/x"]  # fmt: skip
QUERY = [
    "status",
    "project",
    "owner",
    "array",
    "cause",
    "q",
    "before",
    "block",
    "rank",
    "done",
    "next",
    "after",
]
FUZZ = settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))


@pytest.fixture
def browser(site: Site) -> Iterator[tuple[Site, httpx.Client, str]]:
    b = signed_in(site.transport, KEY)
    yield site, b, csrf_of(b.get("/ui/submit").text)


def _fine(resp: httpx.Response) -> None:
    assert resp.status_code < 500, resp.text[:500]
    assert "Traceback" not in resp.text


def test_random_queries_and_paths_get_no_server_error(browser: tuple[Site, httpx.Client, str]) -> None:
    _, b, _ = browser

    @FUZZ
    @given(st.sampled_from(PAGES), st.dictionaries(st.sampled_from(QUERY), TEXT, max_size=4), TEXT)
    def run(path: str, params: dict[str, str], tail: str) -> None:
        _fine(b.get(path, params=params))
        _fine(b.get(f"/ui/sessions/{quote(tail[:100], safe='')}", params={"rank": tail[:10]}))

    run()


def test_random_forms_get_no_server_error_and_make_nothing_wrong(
    browser: tuple[Site, httpx.Client, str],
) -> None:
    site, b, csrf = browser

    @FUZZ
    @given(st.dictionaries(st.sampled_from(FIELDS), TEXT, max_size=8))
    def run(form: dict[str, str]) -> None:
        got = b.post("/ui/submit", data={"csrf_token": csrf, **form})
        _fine(got)
        if got.status_code == 303:  # accepted: then it is a session the API shows
            sid = got.headers["location"].split("/ui/sessions/")[1].split("?")[0]
            assert site.api.get(f"/api/v1/sessions/{sid}").status_code == 200
        _fine(b.post("/ui/sessions/x/cancel", data={"csrf_token": csrf, **form}))
        _fine(b.post("/ui/deployments/x/scale", data={"csrf_token": csrf, **form}))
        _fine(b.post("/ui/login", data=form))

    run()
