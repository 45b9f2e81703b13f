"""Use cases: who may do what, one unit of work each.  Callers hold the database as the `Engine`
the services take, and never reach the store themselves."""

from corral.store.unit import Engine

__all__ = ["Engine"]
