"""The store's seam: the names services and the manager hold it by.

An `Engine` opens units of work (`store.db.transaction`, `reading`); a `Tx` is one of
them, and the store's modules are its operations (`store.sessions.insert_session(tx, ...)`).  Only
the store knows they are SQLAlchemy's objects, so nothing above it imports SQLAlchemy or a driver;
what goes wrong comes out as `corral.domain.errors`."""

from __future__ import annotations

from typing import TypeAlias

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

Engine: TypeAlias = AsyncEngine
Tx: TypeAlias = AsyncConnection

__all__ = ["Engine", "Tx"]
