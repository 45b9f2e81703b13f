"""/ui/submit: a session from a form, validated exactly as POST /api/v1/sessions validates it.

The priority field is editable only where the caller's rules let them change it (GET /me's), bounded
to their range with the default filled in; a value the rules refuse is refused with the API's own
message.  A refused form comes back filled in, the field named."""

from __future__ import annotations

import shlex
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError
from starlette.datastructures import FormData

from corral.api.schemas import SessionCreate
from corral.api.state import State
from corral.domain.cause import NEVER_RETRIABLE, Cause
from corral.domain.spec import AntiAffinity, Backoff, Jitter
from corral.services import admission, policies, users
from corral.services.errors import CorralError
from corral.web.auth import Seen, form_of, text
from corral.web.templating import page

router = APIRouter(include_in_schema=False)


async def _choices(state: State, viewer: Seen) -> dict[str, Any]:
    me = await users.me(state.reader, viewer.who)
    # The API lists named policies to admins only; a member names one in the text field.
    named = (
        [p["metadata"]["name"] for p in await policies.list_all(state.reader)] if viewer.who.is_admin else []
    )
    return {
        "projects": me["projects"],
        "rules": me["priority"],
        "policies": named,
        "backoffs": list(Backoff),
        "jitters": list(Jitter),
        "affinities": list(AntiAffinity),
        "causes": sorted(str(c) for c in Cause if c not in NEVER_RETRIABLE),
    }


def _body(form: FormData, rules: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The API's request body from the form (empty fields left out: the API's defaults apply)."""
    body: dict[str, Any] = {"command": shlex.split(text(form, "command"))}
    for name in ("name", "project"):
        if text(form, name):
            body[name] = text(form, name)
    resources = {k: text(form, k) for k in ("cpu", "mem", "gpu") if text(form, k)}
    if resources:
        body["resources"] = {k: (float(v) if k == "cpu" and _number(v) else v) for k, v in resources.items()}
    for name in ("cluster_size", "priority"):
        if text(form, name):
            body[name] = _typed(text(form, name), int)
    project = body.get("project") or (next(iter(rules)) if len(rules) == 1 else None)
    if "priority" in body and project in rules and not rules[project]["may_change"]:
        del body["priority"]  # a locked field the browser sent anyway: the rules' default applies
    retry: dict[str, Any] = {}
    for name, kind in RETRY_FIELDS.items():
        given = text(form, name)
        if given:
            retry[name] = _typed(given, kind)
    causes = [v for v in form.getlist("eligible_causes") if isinstance(v, str) and v]
    if causes:
        retry["eligible_causes"] = causes
    if retry:
        body["retry_policy"] = retry
    named = [
        v.strip()
        for v in form.getlist("retry_policies")
        if isinstance(v, str)
        for v in v.split(",")
        if v.strip()
    ]
    if named:
        body["retry_policies"] = named
    return body


RETRY_FIELDS = {
    "max_retries": int,
    "retry_delay": str,
    "backoff": str,
    "backoff_multiplier": float,
    "max_retry_delay": str,
    "jitter": str,
    "jitter_ratio": float,
    "anti_affinity": str,
    "max_retry_duration": str,
}
"""The inline retry policy's fields the form has, and how each is typed on the wire."""


def _typed(given: str, kind: type) -> Any:
    """A form's text as the API's JSON would carry it; left as text when it is not one (the
    schema then refuses it, naming the field)."""
    try:
        return kind(given)
    except ValueError:
        return given


def _number(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


def _invalid(exc: ValidationError) -> tuple[str, str]:
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first.get("loc", ())) or "body"
    return field, f"{field}: {first.get('msg', 'invalid')}"


@router.get("/ui/submit")
async def submit_page(request: Request, state: State, viewer: Seen) -> Response:
    choices = await _choices(state, viewer)
    return page(request, "submit.html", viewer, values={}, chosen={}, error=None, field=None, **choices)


@router.post("/ui/submit")
async def submit(request: Request, state: State, viewer: Seen) -> Response:
    form = await form_of(request, viewer)
    choices = await _choices(state, viewer)
    values = {k: v for k, v in form.multi_items() if k != "csrf_token"}
    choices["chosen"] = {k: form.getlist(k) for k in ("retry_policies", "eligible_causes")}
    try:
        body = _body(form, choices["rules"])
        create = SessionCreate.model_validate(body)
        fields = (
            create.retry_policy.model_dump(mode="json", exclude_unset=True) if create.retry_policy else None
        )
        asked = create.priority if "priority" in create.model_fields_set else None
        record, _ = await admission.create(state.engine, viewer.who, create.to_spec(), fields, asked)
    except ValidationError as exc:
        field, message = _invalid(exc)
        return page(request, "submit.html", viewer, 422, values=values, error=message, field=field, **choices)
    except ValueError as exc:  # shlex: an unclosed quote
        return page(
            request,
            "submit.html",
            viewer,
            422,
            values=values,
            error=f"command: {exc}",
            field="command",
            **choices,
        )
    except CorralError as exc:
        field = str(exc.details.get("field", ""))
        return page(
            request,
            "submit.html",
            viewer,
            exc.status,
            values=values,
            error=exc.message,
            field=field,
            **choices,
        )
    state.wakeup.scheduler()
    return RedirectResponse(f"/ui/sessions/{record.id}?done=submitted", status_code=303)
