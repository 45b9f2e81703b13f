"""The cluster's runtime settings as values: defaults, nesting, and checking (DESIGN §5)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from corral.domain.failure import DEFAULT_CATEGORIES, CategoryRule, categories_from
from corral.domain.policy import PolicyError, RuleBackoff, backoff_from
from corral.domain.retry import ClusterRetry
from corral.domain.spec import RetryPolicy

# Every setting, with its default; the API and CLI use these dotted names.
DEFAULTS: dict[str, Any] = {
    "retry.enabled": True,
    "retry.global_max_retries": 20,
    "retry.dispatch_rate": None,
    "retry.defaults": {},
    "retry.default_policy": None,
    "retry.default_backoff": {},
    "failure_categories": [dict(c) for c in DEFAULT_CATEGORIES],
    "webhooks.allow_private": False,
}


@dataclass(frozen=True)
class ClusterSettings:
    """The cluster's settings as the engine uses them."""

    retry: ClusterRetry = field(default_factory=ClusterRetry)
    """Kill switch, global cap, storm guard."""
    retry_defaults: Mapping[str, Any] = field(default_factory=dict)
    """Inline policy fields every session gets unless its project or itself says otherwise."""
    categories: tuple[CategoryRule, ...] = ()
    """Operator failure-category rules, in order."""
    default_policy: str | None = None
    """The named policy of a session whose project and itself name none (Armada's default)."""
    default_backoff: RuleBackoff = field(default_factory=RuleBackoff)
    """The backoff of named policies and rules that give none."""
    webhooks_allow_private: bool = False
    """Webhooks may target loopback, link-local and private addresses (the SSRF guard is off)."""


MAX_BACKOFF_SECONDS = 24 * 3600.0
_NULLABLE = ("retry.dispatch_rate", "retry.default_policy")


def values_of(stored: Mapping[str, Any]) -> dict[str, Any]:
    return {key: stored.get(key, default) for key, default in DEFAULTS.items()}


def nested(values: Mapping[str, Any]) -> dict[str, Any]:
    """{"retry.enabled": x} -> {"retry": {"enabled": x}} (the JSON the API shows)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        head, _, tail = key.partition(".")
        if tail:
            out.setdefault(head, {})[tail] = value
        else:
            out[head] = value
    return out


def settings_of(values: Mapping[str, Any]) -> ClusterSettings:
    """Typed settings; a value that cannot be used raises PolicyError naming it (a database edited
    by hand must stop the manager with one line, never make it guess)."""
    rate = values["retry.dispatch_rate"]
    try:
        retry = ClusterRetry(
            enabled=_typed(values, "retry.enabled", bool),
            global_max_retries=_typed(values, "retry.global_max_retries", int),
            dispatch_rate=float(_typed(values, "retry.dispatch_rate", (int, float))) if rate else None,
        )
        defaults = _typed(values, "retry.defaults", dict)
        RetryPolicy.from_json(defaults)
    except (TypeError, ValueError) as exc:
        raise PolicyError("retry.defaults", f"cannot be used: {exc}") from None
    rules = _typed(values, "failure_categories", list)
    return ClusterSettings(
        retry=retry,
        retry_defaults=defaults,
        categories=categories_from(rules),
        default_policy=_typed(values, "retry.default_policy", str),
        default_backoff=_backoff(_typed(values, "retry.default_backoff", dict)),
        webhooks_allow_private=_typed(values, "webhooks.allow_private", bool),
    )


def _backoff(raw: Mapping[str, Any]) -> RuleBackoff:
    """Armada's defaults (0 s, 10 min, 2.0) for what is not given; each value checked."""
    key = "retry.default_backoff"
    unknown = sorted(set(raw) - {"initial_delay", "max_delay", "multiplier"})
    if unknown:
        raise PolicyError(f"{key}.{unknown[0]}", "not a backoff field (initial_delay, max_delay, multiplier)")
    for name, value in raw.items():
        if not isinstance(value, int | float) or isinstance(value, bool) or value != value:
            raise PolicyError(f"{key}.{name}", f"{value!r} is not a number"[:200])
    backoff = backoff_from(raw, RuleBackoff())
    for name, value, low in (
        ("initial_delay", backoff.initial_delay, 0.0),
        ("max_delay", backoff.max_delay, 0.0),
        ("multiplier", backoff.multiplier, 1.0),
    ):
        high = 100.0 if name == "multiplier" else MAX_BACKOFF_SECONDS
        if not low <= value <= high:
            raise PolicyError(f"{key}.{name}", f"must be {low:g} to {high:g}, not {value!r}"[:200])
    return backoff


def _typed(values: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = values[key]
    if value is None and key in _NULLABLE:
        return value
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise PolicyError(key, f"{value!r} is not a valid value"[:200])
    return value
