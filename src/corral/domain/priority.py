"""Who may ask for which priority (DESIGN §6, §9): a project's rules, overridden by a user's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

PRIORITY_MIN = 0
PRIORITY_MAX = 100


@dataclass(frozen=True)
class PriorityRules:
    """The priorities a caller may give a session in one project."""

    default: int = 10
    """Given to a session that asks for none."""
    may_change: bool = True
    """Whether the caller may ask for another priority at all."""
    min: int = PRIORITY_MIN
    """Lowest priority the caller may ask for."""
    max: int = PRIORITY_MAX
    """Highest priority the caller may ask for."""

    def to_json(self) -> dict[str, Any]:
        return {"default": self.default, "may_change": self.may_change, "min": self.min, "max": self.max}


class PriorityRefused(Exception):
    """A requested priority the rules do not allow."""

    def __init__(self, message: str, forbidden: bool) -> None:
        super().__init__(message)
        self.forbidden = forbidden
        """True: changing it is not allowed at all (403); False: outside the range (422)."""


def overlay(base: PriorityRules, raw: Mapping[str, Any] | None) -> PriorityRules:
    """`base` with the fields `raw` sets (a stored project's or user's rules; unknown keys ignored)."""
    given = {f.name: raw[f.name] for f in fields(PriorityRules) if raw and raw.get(f.name) is not None}
    return replace(base, **given)


def effective(project: Mapping[str, Any] | None, user: Mapping[str, Any] | None) -> PriorityRules:
    """The user's rules override the project's, field by field; both over the defaults."""
    return overlay(overlay(PriorityRules(), project), user)


def choose(rules: PriorityRules, requested: int | None, is_admin: bool = False) -> int:
    """The session's priority: the default when none is asked for; what is asked for when allowed.
    An admin may ask for any priority; asking for the default is never a change."""
    if requested is None:
        return rules.default
    if is_admin or requested == rules.default:
        return requested
    if not rules.may_change:
        raise PriorityRefused(f"you may not choose a priority here (it is {rules.default})", forbidden=True)
    if not rules.min <= requested <= rules.max:
        raise PriorityRefused(
            f"priority {requested} is outside the range you may use here ({rules.min}..{rules.max})",
            forbidden=False,
        )
    return requested
