"""/ui/admin/…: for admins, read-only pages of the retry policies, resource groups, users and the
audit log (changes stay in the CLI and API)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from corral.api.state import State
from corral.services import cluster, groups, policies, users
from corral.services.errors import Forbidden
from corral.web.auth import Seen
from corral.web.templating import page

router = APIRouter(include_in_schema=False)


def _admin(viewer: Seen) -> None:
    if not viewer.who.is_admin:
        raise Forbidden("admin only: these pages show the whole cluster")


@router.get("/ui/admin/policies")
async def policies_page(request: Request, state: State, viewer: Seen) -> Response:
    _admin(viewer)
    return page(request, "admin_policies.html", viewer, policies=await policies.list_all(state.reader))


@router.get("/ui/admin/groups")
async def groups_page(request: Request, state: State, viewer: Seen) -> Response:
    _admin(viewer)
    return page(request, "admin_groups.html", viewer, groups=await groups.listed(state.reader))


@router.get("/ui/admin/users")
async def users_page(request: Request, state: State, viewer: Seen) -> Response:
    _admin(viewer)
    return page(request, "admin_users.html", viewer, users=await users.listed(state.reader))


@router.get("/ui/admin/audit")
async def audit_page(
    request: Request, state: State, viewer: Seen, after: Annotated[int, Query(ge=0, le=2**62)] = 0
) -> Response:
    _admin(viewer)
    rows = await cluster.audit(state.reader, after, 100, None)
    return page(request, "admin_audit.html", viewer, rows=rows, after=after)
