"""/docs (Swagger UI) and /redoc (ReDoc), with their scripts served from the package, and the bearer
schemes /openapi.json declares for Swagger UI's Authorize button.

FastAPI's own pages load them from a CDN, so on a cluster without internet access they are blank.
These pages name only same-origin URLs: the assets vendored in static/ (see its README)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"
ASSETS = "/static/docs"

SCHEMES = {
    "apiKey": {"type": "http", "scheme": "bearer", "description": "A user's API key"},
    "agentToken": {"type": "http", "scheme": "bearer", "description": "The agents' CORRAL_AGENT_TOKEN"},
}
AGENT_PROTOCOL = "/api/v1/agent/"


def scheme_of(path: str) -> str | None:
    """The rule of state.py: every /api/v1 route takes `Authorization: Bearer <API key>` (Caller,
    Admin), but the agent protocol's, which take the agents' token (AgentAuth); nothing else
    takes one.  test_docs.py holds every route to it: a declared route answers 401 without a key,
    an undeclared one does not.  Declared here, not read through HTTPBearer dependencies, which
    would declare the same but give every request one dependency more to solve."""
    if path.startswith(AGENT_PROTOCOL):
        return "agentToken"
    return "apiKey" if path.startswith("/api/v1/") else None


def with_security(schema: dict[str, Any]) -> dict[str, Any]:
    schema.setdefault("components", {})["securitySchemes"] = SCHEMES
    for path, operations in schema["paths"].items():
        if (scheme := scheme_of(path)) is not None:
            for operation in operations.values():
                operation["security"] = [{scheme: []}]
    return schema


def install(app: FastAPI) -> None:
    """Needs `FastAPI(docs_url=None, redoc_url=None)`: these routes replace FastAPI's.  None of them
    asks for a key, as FastAPI's did not: a reader must see the pages before authorizing."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:  # made once, at the first request for it, then kept
            app.openapi_schema = with_security(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend it
    app.mount(ASSETS, StaticFiles(directory=STATIC), name="docs-assets")
    title = f"{app.title} API"

    def base(request: Request) -> str:
        # Behind a proxy that mounts the manager under a prefix, every URL the page names keeps
        # it, as FastAPI's own pages do for openapi_url.
        root: str = request.scope.get("root_path", "")
        return root.rstrip("/")

    @app.get("/docs", include_in_schema=False)
    async def swagger(request: Request) -> HTMLResponse:
        root = base(request)
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=title,
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon-32x32.png",
            # Swagger UI's default sends the spec to validator.swagger.io for a badge: offline, a
            # broken image, and online, our API's description handed to a third party.
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = base(request)
        return get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=title,
            redoc_js_url=f"{root}{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS}/favicon-32x32.png",
            # Google Fonts, the page's only other host: unreachable offline; ReDoc then uses the system's.
            with_google_fonts=False,
        )
