"""Signing in to the web UI: an API key, pasted once, becomes a signed cookie naming a sign-in row.

The rules.  The cookie is `TOKEN.SIGNATURE` (HMAC-SHA256 of the token with the cluster's signing
key, kept in the database so that every manager honours every manager's cookies); only the
token's hash is stored.  A sign-in ends when it expires, when it is signed out, or when the API
key it was made with is revoked (it is looked up on every request, never cached).  Each sign-in
has a CSRF token that every form it posts must carry."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from corral.domain.records import Principal
from corral.services.errors import Unauthorized
from corral.store import auth, web_sessions
from corral.store.db import reading, transaction
from corral.store.unit import Engine
from corral.store.web_sessions import WebSession

COOKIE = "corral_session"
MAX_COOKIE = 200
_keys: dict[int, str] = {}
"""The signing key per engine, once read: it never changes."""


@dataclass(frozen=True)
class Viewer:
    """Who a signed-in browser is, and the CSRF token its forms carry."""

    who: Principal
    csrf: str
    token_hash: str


@dataclass(frozen=True)
class SignedIn:
    cookie: str
    csrf: str
    expires_at: datetime


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _signature(key: str, token: str) -> str:
    mac = hmac.new(key.encode(), token.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


async def sign_in(engine: Engine, api_key: str, now: datetime, lifetime: timedelta) -> SignedIn:
    """A new sign-in for the holder of `api_key` (401 naming `api_key` for a key nobody has)."""
    api_key = api_key.strip()
    async with reading(engine) as conn:
        who = await auth.principal_for(conn, api_key) if api_key else None
    if who is None:
        raise Unauthorized("unknown API key", {"field": "api_key"})
    token, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    expires = now + lifetime
    async with transaction(engine) as conn:
        key = await web_sessions.signing_key(conn, now)
        await web_sessions.add(
            conn, WebSession(_hash(token), auth.hash_key(api_key), csrf, now, expires, None)
        )
        await web_sessions.prune(conn, now - timedelta(days=7))
    return SignedIn(f"{token}.{_signature(key, token)}", csrf, expires)


async def _signing_key(reader: Engine) -> str | None:
    key = _keys.get(id(reader))
    if key is None:
        async with reading(reader) as conn:
            found = await web_sessions.key(conn)
        if found is None:
            return None  # nobody has signed in yet: no cookie can be good
        key = _keys[id(reader)] = found
    return key


async def identify(reader: Engine, cookie: str, now: datetime) -> Viewer | None:
    """The viewer a cookie stands for; None for a forged, expired, ended or revoked one."""
    token, dot, signature = cookie[:MAX_COOKIE].partition(".")
    if not dot or not token:
        return None
    key = await _signing_key(reader)
    if key is None or not hmac.compare_digest(signature.encode(), _signature(key, token).encode()):
        return None
    async with reading(reader) as conn:
        found = await web_sessions.live(conn, _hash(token), now)
        who = None if found is None else await auth.principal_by_hash(conn, found.key_hash)
    if found is None or who is None:
        return None
    return Viewer(who, found.csrf, found.token_hash)


async def sign_out(engine: Engine, viewer: Viewer, now: datetime) -> None:
    async with transaction(engine) as conn:
        await web_sessions.end(conn, viewer.token_hash, now)


def csrf_ok(viewer: Viewer, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), viewer.csrf.encode())
