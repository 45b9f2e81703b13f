"""/ui/login and /ui/logout: an API key pasted once becomes a signed, HttpOnly sign-in cookie."""

from __future__ import annotations

import hmac
import secrets
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response

from corral.api.state import State
from corral.clock import utcnow
from corral.services import web_sessions
from corral.services.errors import Unauthorized
from corral.services.web_sessions import COOKIE
from corral.web.auth import MAX_FIELD_BYTES, MAX_FORM_FIELDS, Seen, form_of, text
from corral.web.templating import page

router = APIRouter(include_in_schema=False)

LOGIN_CSRF = "corral_login_csrf"
"""Before a sign-in exists, its form's CSRF token is checked against this cookie (double submit)."""


def _back(given: str | None) -> str:
    """Where to go after signing in: a page of the UI, never another site."""
    if given and given.startswith("/ui/") and not given.startswith("//") and "\\" not in given:
        return given
    return "/ui/sessions"


def _form(request: Request, back: str, status: int = 200, error: str | None = None) -> Response:
    token = secrets.token_urlsafe(24)
    response = page(request, "login.html", None, status, csrf=token, back=back, error=error)
    response.set_cookie(
        LOGIN_CSRF, token, httponly=True, samesite="strict", secure=request.url.scheme == "https", path="/ui/"
    )
    return response


@router.get("/ui/login")
async def login_page(
    request: Request, state: State, next: Annotated[str | None, Query(max_length=2000)] = None
) -> Response:
    cookie = request.cookies.get(COOKIE)
    if cookie and await web_sessions.identify(state.reader, cookie, utcnow()):
        return RedirectResponse(_back(next), status_code=303)
    return _form(request, _back(next))


@router.post("/ui/login")
async def login(request: Request, state: State) -> Response:
    form = await request.form(max_files=0, max_fields=MAX_FORM_FIELDS, max_part_size=MAX_FIELD_BYTES)
    back = _back(text(form, "next"))
    given, expected = text(form, "csrf_token"), request.cookies.get(LOGIN_CSRF, "")
    if not given or not expected or not hmac.compare_digest(given.encode(), expected.encode()):
        return _form(request, back, 403, "The form was stale (csrf_token): sign in again.")
    try:
        signed = await web_sessions.sign_in(
            state.engine,
            text(form, "api_key"),
            utcnow(),
            timedelta(seconds=state.settings.web_session_lifetime),
        )
    except Unauthorized:
        return _form(request, back, 401, "Unknown API key (api_key): paste a key `corral user key` gave.")
    response = RedirectResponse(back, status_code=303)
    response.set_cookie(
        COOKIE,
        signed.cookie,
        expires=signed.expires_at,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    response.delete_cookie(LOGIN_CSRF, path="/ui/")
    return response


@router.post("/ui/logout")
async def logout(request: Request, state: State, viewer: Seen) -> Response:
    await form_of(request, viewer)
    await web_sessions.sign_out(state.engine, viewer, utcnow())
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response
