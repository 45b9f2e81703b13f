"""The web UI on the manager's app: its pages under /ui/, its static files, / redirecting there,
and errors on its pages shown as pages (the API's stay JSON)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from corral.services.errors import CorralError
from corral.web.auth import SignInNeeded, login_url
from corral.web.pages import admin, agents, arrays, deployments, login, queue, session, sessions, submit
from corral.web.templating import HERE, page


def error_page(request: Request, exc: CorralError) -> Response:
    return page(request, "error.html", None, exc.status, error=exc)


def install(app: FastAPI) -> None:
    for module in (login, sessions, session, submit, arrays, queue, deployments, agents, admin):
        app.include_router(module.router)
    app.mount("/ui/static", StaticFiles(directory=HERE / "static"), name="ui-static")

    @app.exception_handler(SignInNeeded)
    async def _sign_in(request: Request, exc: SignInNeeded) -> Response:
        if exc.fragment:
            return Response(status_code=200, headers={"HX-Redirect": login_url(exc.back)})
        return RedirectResponse(login_url(exc.back), status_code=303)

    @app.get("/", include_in_schema=False)
    async def _root() -> Response:
        return RedirectResponse("/ui/sessions", status_code=307)

    @app.get("/ui", include_in_schema=False)
    @app.get("/ui/", include_in_schema=False)
    async def _ui() -> Response:
        return RedirectResponse("/ui/sessions", status_code=307)
