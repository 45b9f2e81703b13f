"""Who is looking: the sign-in cookie, checked on every request; a form's CSRF token, checked on
every POST.  A page asked for without a good cookie redirects to the sign-in page, and back."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote, urlencode

from fastapi import Depends, Request
from starlette.datastructures import FormData

from corral.api.state import State
from corral.clock import utcnow
from corral.services import web_sessions
from corral.services.errors import Forbidden
from corral.services.web_sessions import COOKIE, Viewer

MAX_FORM_FIELDS = 64
MAX_FIELD_BYTES = 64 * 1024


class SignInNeeded(Exception):
    """Answered with a redirect to /ui/login, naming where to come back to."""

    def __init__(self, back: str, fragment: bool = False) -> None:
        super().__init__(back)
        self.back = back
        self.fragment = fragment
        """An htmx refresh asked: the whole page is sent to sign in (HX-Redirect), not the form
        into its fragment."""


def login_url(back: str) -> str:
    return f"/ui/login?next={quote(back, safe='/')}"


async def viewer(request: Request, state: State) -> Viewer:
    cookie = request.cookies.get(COOKIE)
    found = await web_sessions.identify(state.reader, cookie, utcnow()) if cookie else None
    if found is None:
        # Back to the page itself, never to one of its fragments (an htmx refresh's ?block=).
        query = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "block"])
        raise SignInNeeded(request.url.path + (f"?{query}" if query else ""), "hx-request" in request.headers)
    return found


Seen = Annotated[Viewer, Depends(viewer)]


async def form_of(request: Request, who: Viewer) -> FormData:
    """The posted form, once its csrf_token is this sign-in's (403 naming it otherwise)."""
    form = await request.form(max_files=0, max_fields=MAX_FORM_FIELDS, max_part_size=MAX_FIELD_BYTES)
    token = form.get("csrf_token")
    if not isinstance(token, str) or not web_sessions.csrf_ok(who, token):
        raise Forbidden("the form's csrf_token is missing or stale: reload the page", {"field": "csrf_token"})
    return form


def text(form: FormData, name: str, default: str = "") -> str:
    value = form.get(name, default)
    return value.strip() if isinstance(value, str) else default
