"""Named retry policies (Armada's RetryPolicy resource) as values, and which rule a failure matches."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import regex

from corral.domain.spec import AntiAffinity


class Condition(StrEnum):
    """Kernel conditions, each set by one event (DESIGN §4)."""

    OOM_KILLED = "oom_killed"
    EVICTED = "evicted"
    PREEMPTED = "preempted"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    UNSCHEDULABLE = "unschedulable"
    IMAGE_PULL_FAILURE = "image_pull_failure"


class RuleAction(StrEnum):
    RETRY = "retry"
    FAIL = "fail"
    IGNORE = "ignore"


class DefaultAction(StrEnum):
    RETRY = "retry"
    FAIL = "fail"


class CodeOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"


@dataclass(frozen=True)
class KernelFacts:
    """One kernel that failed on its own (not one Corral stopped because a peer failed), as a
    matcher restricted to a kernel role sees it."""

    role: str
    """main, sub."""
    exit_code: int | None = None
    """Its exit code (None: no process exited)."""
    conditions: frozenset[Condition] = frozenset()
    """Its conditions."""
    message: str = ""
    """Its termination log, else its record's message, else its log tail."""


@dataclass(frozen=True)
class FailureFacts:
    """What a matcher may look at: the failed attempt as classified, root-cause kernel first."""

    cause: str
    """The session's cause (DESIGN §4)."""
    exit_code: int | None = None
    """The root-cause kernel's exit code (None: no process exited)."""
    conditions: frozenset[Condition] = frozenset()
    """Conditions of the failed attempt."""
    message: str = ""
    """Termination log, else the root-cause record's message, else the log tail."""
    log_tail: str = ""
    """The last lines of the root-cause kernel's output."""
    categories: frozenset[str] = frozenset()
    """Failure categories the operator rules gave it."""
    kernels: tuple[KernelFacts, ...] = ()
    """Every kernel that failed on its own, the root cause among them: a matcher with a kernel_role
    looks at those of its role, not at the root cause (Armada's containerName)."""
    recoverable: bool | None = None
    """The root-cause record's own word, when it said."""
    agent_id: str | None = None
    """Where the root-cause kernel ran (anti-affinity avoids it)."""


@dataclass(frozen=True)
class RuleBackoff:
    """Armada's backoff: min(initial_delay * multiplier ** (k-1), max_delay)."""

    initial_delay: float = 0.0
    """Seconds before the first retry of a rule."""
    max_delay: float = 600.0
    """Upper bound of the delay."""
    multiplier: float = 2.0
    """Growth per retry of that rule."""

    def delay(self, k: int) -> float:
        """The delay before the k-th retry counted by one rule (k >= 1)."""
        try:
            grown = self.initial_delay * self.multiplier ** max(0, k - 1)
        except OverflowError:
            grown = float("inf")
        return min(grown, self.max_delay)


@dataclass(frozen=True)
class Rule:
    """One rule: every matcher given must hold (AND); none given matches everything."""

    action: RuleAction
    """What a match decides."""
    on_exit_codes: tuple[CodeOperator, frozenset[int]] | None = None
    """Exit codes In/NotIn; never matches exit 0 or a missing code."""
    on_conditions: frozenset[Condition] = frozenset()
    """Any of these conditions."""
    on_termination_message: str | None = None
    """A regex searched in the termination message."""
    on_failure_category: frozenset[str] = frozenset()
    """Any of these categories."""
    on_recoverable: bool | None = None
    """The root-cause record's `recoverable` equals this."""
    kernel_role: str | None = None
    """Only failures of a kernel with this role."""
    retry_limit: int | None = None
    """This rule's own limit (else the policy's, else the global one)."""
    backoff: RuleBackoff | None = None
    """Overrides the policy's backoff."""
    anti_affinity: AntiAffinity | None = None
    """Overrides the policy's anti-affinity."""

    def matches(self, f: FailureFacts) -> bool:
        return (
            common_match(
                f, self.kernel_role, self.on_exit_codes, self.on_conditions, self.on_termination_message
            )
            and (not self.on_failure_category or bool(self.on_failure_category & f.categories))
            and (self.on_recoverable is None or f.recoverable is self.on_recoverable)
        )


ExitCodes = tuple[CodeOperator, frozenset[int]]


def common_match(
    f: FailureFacts,
    kernel_role: str | None,
    on_exit_codes: ExitCodes | None,
    on_conditions: frozenset[Condition],
    on_termination_message: str | None,
) -> bool:
    """The matchers retry rules and failure categories share (each given one must hold): of the
    root cause, or with a `kernel_role` of some failed kernel of that role."""
    matchers = (on_exit_codes, on_conditions, on_termination_message)
    if kernel_role is None:
        return _holds(f.exit_code, f.conditions, f.message, *matchers)
    return any(
        _holds(k.exit_code, k.conditions, k.message, *matchers) for k in f.kernels if k.role == kernel_role
    )


def _holds(
    exit_code: int | None,
    conditions: frozenset[Condition],
    message: str,
    on_exit_codes: ExitCodes | None,
    on_conditions: frozenset[Condition],
    on_termination_message: str | None,
) -> bool:
    if on_exit_codes is not None:
        op, values = on_exit_codes
        # Exit 0 and a missing code (agent lost, image failure) never match, NotIn included.
        if exit_code is None or exit_code == 0 or (exit_code in values) != (op is CodeOperator.IN):
            return False
    if on_conditions and not (on_conditions & conditions):
        return False
    return on_termination_message is None or bounded_search(on_termination_message, message)


# Patterns come from operators and texts from users' kernels: a pattern that backtracks without
# end on some output must not hold the manager (which serves the API) for more than this.
MATCH_SECONDS = 0.05


def bounded_search(pattern: str, text: str) -> bool:
    """Whether `pattern` occurs in `text`; a search that takes too long counts as no match."""
    try:
        return regex.search(pattern, text, timeout=MATCH_SECONDS) is not None
    except TimeoutError:
        return False


def exit_codes_from(raw: Mapping[str, Any] | None) -> ExitCodes | None:
    return (CodeOperator(raw["operator"]), frozenset(raw["values"])) if raw else None


def pattern_from(raw: Mapping[str, Any] | None, field: str) -> str | None:
    return compile_regex(raw["pattern"], f"{field}.pattern") if raw else None


def common_fields(raw: Mapping[str, Any], field: str) -> dict[str, Any]:
    """The matchers rules and categories share, read from their stored shape."""
    return {
        "on_exit_codes": exit_codes_from(raw.get("on_exit_codes")),
        "on_conditions": frozenset(Condition(c) for c in raw.get("on_conditions") or ()),
        "on_termination_message": pattern_from(
            raw.get("on_termination_message"), f"{field}.on_termination_message"
        ),
        "kernel_role": raw.get("kernel_role"),
    }


@dataclass(frozen=True)
class NamedPolicy:
    """A stored, named policy; its rules are tried in order."""

    name: str
    """Unique name (the YAML's metadata.name)."""
    rules: tuple[Rule, ...] = ()
    """In order; the first match wins."""
    retry_limit: int | None = None
    """Default limit of its rules (else the global one)."""
    default_action: DefaultAction = DefaultAction.FAIL
    """When none of its rules matched."""
    backoff: RuleBackoff = RuleBackoff()
    """Default backoff of its rules."""
    anti_affinity: AntiAffinity = AntiAffinity.NONE
    """Default anti-affinity of its rules."""


@dataclass(frozen=True)
class RuleMatch:
    """The first rule that matched, and where it sits."""

    policy: NamedPolicy
    """The policy holding it."""
    index: int
    """Its position in the policy (0-based)."""
    rule: Rule
    """The rule."""

    @property
    def key(self) -> str:
        """Its own retry counter's name."""
        return f"{self.policy.name}#{self.index}"


def first_match(
    policies: Sequence[NamedPolicy], facts: FailureFacts, only: Callable[[Rule], bool] | None = None
) -> RuleMatch | None:
    """The first rule (of those `only` admits) that matches, in policy order then rule order."""
    for policy in policies:
        for i, rule in enumerate(policy.rules):
            if (only is None or only(rule)) and rule.matches(facts):
                return RuleMatch(policy, i, rule)
    return None


# ---- reading a policy from its JSON/YAML shape (the API validates types first; this checks sense)


class PolicyError(ValueError):
    """A policy document that cannot be used; `field` names the offending path."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def compile_regex(pattern: str, field: str) -> str:
    try:
        regex.compile(pattern)
    except (regex.error, RecursionError, OverflowError, ValueError) as exc:
        raise PolicyError(field, f"not a valid regular expression: {exc}") from None
    return pattern


def backoff_from(raw: Mapping[str, Any] | None, default: RuleBackoff) -> RuleBackoff:
    if not raw:
        return default
    return RuleBackoff(
        initial_delay=float(raw.get("initial_delay", default.initial_delay)),
        max_delay=float(raw.get("max_delay", default.max_delay)),
        multiplier=float(raw.get("multiplier", default.multiplier)),
    )


def rule_from(raw: Mapping[str, Any], field: str, default_backoff: RuleBackoff = RuleBackoff()) -> Rule:
    backoff = raw.get("backoff")
    anti = raw.get("anti_affinity")
    return Rule(
        action=RuleAction(raw["action"]),
        **common_fields(raw, field),
        on_failure_category=frozenset(raw.get("on_failure_category") or ()),
        on_recoverable=raw.get("on_recoverable"),
        retry_limit=raw.get("retry_limit"),
        backoff=backoff_from(backoff, default_backoff) if backoff else None,
        anti_affinity=AntiAffinity(anti) if anti else None,
    )


def policy_from(
    name: str, spec: Mapping[str, Any], default_backoff: RuleBackoff = RuleBackoff()
) -> NamedPolicy:
    """A policy from its stored `spec` (type-checked by the API schema; anything else stored is
    refused here with a PolicyError, never another exception); what its backoffs leave out comes
    from `default_backoff` (the cluster's retry.default_backoff)."""
    try:
        return _policy(name, spec, default_backoff)
    except PolicyError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise PolicyError("spec", f"policy {name!r} cannot be used: {exc!r}"[:300]) from None


def _policy(name: str, spec: Mapping[str, Any], default_backoff: RuleBackoff) -> NamedPolicy:
    backoff = backoff_from(spec.get("backoff"), default_backoff)
    return NamedPolicy(
        name=name,
        rules=tuple(rule_from(r, f"spec.rules.{i}", backoff) for i, r in enumerate(spec.get("rules") or ())),
        retry_limit=spec.get("retry_limit"),
        default_action=DefaultAction(spec.get("default_action", DefaultAction.FAIL)),
        backoff=backoff,
        anti_affinity=AntiAffinity(spec.get("anti_affinity") or AntiAffinity.NONE),
    )
