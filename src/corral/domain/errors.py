"""What can go wrong below the services, in the model's words: the store raises these, never its
driver's exceptions, so that nothing above it needs to know which database it runs on."""

from __future__ import annotations


class StoreError(Exception):
    """Something the store could not do."""


class Duplicate(StoreError):
    """A write would have taken a unique key (a name, a creation id) another row holds."""


class Unavailable(StoreError):
    """The database could not be reached, or the connection died under the work.

    `maybe_applied`: False when nothing ran (no connection could be made); True when the
    connection was lost after statements were sent, so a commit may have happened."""

    def __init__(self, message: str, *, maybe_applied: bool) -> None:
        super().__init__(message)
        self.maybe_applied = maybe_applied


class RefusedTransition(Exception):
    """A move the transition table does not allow (a bug in the caller, not a lost race)."""
