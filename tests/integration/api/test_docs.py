"""/docs and /redoc work on a cluster with no internet access: they name only the manager's own URLs,
each of which answers with the vendored asset, and no key is needed to read them.  /openapi.json
declares the bearer schemes on the routes that need a key (Swagger UI's Authorize button), while a
request without a valid key is still refused with the 401 of DESIGN §8."""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

import httpx
import pytest

from tests.support.cluster import Cluster

PAGES = ["/docs", "/redoc"]

# Every URL a page names: its tags' src/href, Swagger UI's `url: '...'`, ReDoc's spec-url.
_ATTRIBUTE = re.compile(r"""\b(?:src|href|spec-url)\s*=\s*["']([^"']*)["']""", re.IGNORECASE)
_SWAGGER_URL = re.compile(r"""\burl\s*:\s*["']([^"']*)["']""")

# What each asset must be: a content type, and a size below which it is not the real file.
KINDS = {".js": ("javascript", 100_000), ".css": ("text/css", 50_000), ".png": ("image/png", 100)}


def anonymous(c: Cluster) -> httpx.Client:
    return httpx.Client(base_url=c.url, timeout=30)


def named_urls(html: str) -> list[str]:
    return _ATTRIBUTE.findall(html) + _SWAGGER_URL.findall(html)


@pytest.mark.parametrize("page", PAGES)
def test_the_page_names_only_its_own_origin(cluster: Cluster, page: str) -> None:
    with anonymous(cluster) as http:
        r = http.get(page)
    assert r.status_code == 200, r.text[:300]
    assert r.headers["content-type"].startswith("text/html")
    html = r.text
    assert "cdn.jsdelivr.net" not in html and "googleapis" not in html
    assert not re.search(r"(?i)\bhttps?://", html), html
    urls = named_urls(html)
    assert len(urls) >= 3, html  # the script, the favicon, the OpenAPI document (and Swagger's CSS)
    for url in urls:
        # Path-absolute on this origin: not "//host/..." (protocol-relative) nor "scheme:...".
        assert url.startswith("/") and not url.startswith("//"), url
    assert "/openapi.json" in urls


@pytest.mark.parametrize("page", PAGES)
def test_every_asset_answers_without_a_key(cluster: Cluster, page: str) -> None:
    with anonymous(cluster) as http:
        html = http.get(page).text
        assets = [u for u in named_urls(html) if u != "/openapi.json"]
        assert any(u.endswith(".js") for u in assets), html
        for url in assets:
            r = http.get(url)
            assert r.status_code == 200, (url, r.status_code, r.text[:200])
            kind, least = next(v for k, v in KINDS.items() if url.endswith(k))
            assert kind in r.headers["content-type"], (url, r.headers["content-type"])
            assert len(r.content) >= least, (url, len(r.content))
            if kind == "image/png":
                assert r.content.startswith(b"\x89PNG\r\n\x1a\n"), url
        assert http.get("/openapi.json").status_code == 200
        # The mount serves its own files, not their neighbours (static/../state.py exists): the dots
        # are escaped so that the client sends them as they are.
        for escaped in ("%2e%2e/state.py", "..%2fstate.py"):
            assert http.get(f"/static/docs/{escaped}").status_code == 404, escaped
        assert http.get("/static/docs/missing.js").status_code == 404


def _document(c: Cluster) -> dict[str, Any]:
    with anonymous(c) as http:
        r = http.get("/openapi.json")
    assert r.status_code == 200
    document: dict[str, Any] = r.json()
    return document


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    methods = {"get", "put", "post", "delete", "patch"}
    return [
        (m.upper(), p, op) for p, item in document["paths"].items() for m, op in item.items() if m in methods
    ]


def test_the_document_declares_the_bearer_schemes(cluster: Cluster) -> None:
    document = _document(cluster)
    schemes = document["components"]["securitySchemes"]
    bearers = {name for name, s in schemes.items() if s["type"] == "http" and s["scheme"].lower() == "bearer"}
    assert bearers == set(schemes) and len(bearers) == 2, schemes
    sessions = document["paths"]["/api/v1/sessions"]["get"]["security"]
    assert sessions == [{"apiKey": []}], sessions
    agent = document["paths"]["/api/v1/agent/orders"]["post"]["security"]
    assert agent == [{"agentToken": []}], agent
    # Every API route declares a key, and no other (/healthz) claims one.
    for method, path, op in _operations(document):
        declared = [name for requirement in op.get("security", []) for name in requirement]
        assert (len(declared) == 1 and declared[0] in bearers) == path.startswith("/api/v1/"), (method, path)


def _refused(r: httpx.Response, what: object) -> None:
    assert r.status_code == 401, (what, r.status_code, r.text[:300])
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}, (what, body)
    assert body["error"]["code"] == "unauthorized", (what, body)
    assert body["error"]["details"] == {"field": "authorization"}, (what, body)


def test_every_route_that_declares_a_key_refuses_none_with_401(cluster: Cluster) -> None:
    """As it did before the schemes were declared: never a 403, never FastAPI's own 401 body."""
    with anonymous(cluster) as http:
        for method, path, op in _operations(_document(cluster)):
            url = re.sub(r"\{[^}]+\}", "x", path)
            body = {} if method in ("POST", "PATCH", "PUT") else None
            r = http.request(method, url, json=body)
            if op.get("security"):
                _refused(r, (method, path))
                assert "missing API key" in r.json()["error"]["message"]
            else:
                assert r.status_code == 200, (method, path, r.status_code)


@pytest.mark.parametrize(
    "authorization",
    ["Basic YWRtaW46YWRtaW4=", "Bearer", "bearer nobody-has-this", "Bearer two words", "Token x"],
)
def test_a_malformed_or_unknown_key_is_refused(cluster: Cluster, authorization: str) -> None:
    with anonymous(cluster) as http:
        _refused(http.get("/api/v1/sessions", headers={"Authorization": authorization}), authorization)
        _refused(
            http.post("/api/v1/agent/orders", json={}, headers={"Authorization": authorization}), "agent"
        )
        # A user's key is not the agents' token.
        r = http.post("/api/v1/agent/orders", json={}, headers={"Authorization": f"Bearer {cluster.key}"})
        _refused(r, "user key on an agent route")


def test_the_header_swagger_sends_is_accepted(cluster: Cluster) -> None:
    """Swagger UI's Authorize for an http bearer scheme sends `Authorization: Bearer <value>`; the
    scheme word is matched without regard to case, as before."""
    with anonymous(cluster) as http:
        for scheme in ("Bearer", "bearer", "BEARER"):
            r = http.get("/api/v1/sessions", headers={"Authorization": f"{scheme} {cluster.key}"})
            assert r.status_code == 200, (scheme, r.text[:300])


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.parametrize(("page", "rendered"), [("/docs", "opblock"), ("/redoc", "api-content")])
def test_the_page_renders_in_a_browser(cluster: Cluster, page: str, rendered: str) -> None:
    """A headless Chromium that may reach only the manager renders the operations: the scripts run
    and fetch /openapi.json from the same origin.  The proxy setting sends any other host's request
    nowhere, so a page that still needed a CDN would render blank here too."""
    assert CHROMIUM is not None, "no Chromium: `make test` installs it (a skipped browser test is a failure)"
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",  # the suite runs as root
            "--disable-gpu",
            "--proxy-server=127.0.0.1:9",
            "--proxy-bypass-list=127.0.0.1",
            "--virtual-time-budget=15000",
            "--dump-dom",
            cluster.url + page,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert rendered in done.stdout and "/api/v1/sessions" in done.stdout, done.stdout[-2000:]
