"""The retry decision (DESIGN §5): evaluation order, counters, delays, and the jitter test vector."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.domain.cause import Cause
from corral.domain.cluster import settings_of, values_of
from corral.domain.failure import DEFAULT_CATEGORIES, categories_from, categorise, termination_message
from corral.domain.policy import (
    CodeOperator,
    Condition,
    DefaultAction,
    FailureFacts,
    KernelFacts,
    NamedPolicy,
    PolicyError,
    Rule,
    RuleAction,
    RuleBackoff,
    policy_from,
)
from corral.domain.retry import (
    FREE_CEILING,
    AttemptBrief,
    Chain,
    ClusterRetry,
    Decision,
    Verdict,
    decide,
    held,
    inline_delay,
    shown_retry_state,
)
from corral.domain.spec import AntiAffinity, Backoff, Jitter, RetryPolicy, SessionType

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ROOT = "00000000-0000-4000-8000-000000000001"


def chain(retry_count: int = 0, total: int | None = None, **counts: int) -> Chain:
    return Chain(ROOT, retry_count, retry_count if total is None else total, counts)


def facts(cause: Cause = Cause.KERNEL_NONZERO_EXIT, code: int | None = 1, **kw: object) -> FailureFacts:
    return FailureFacts(cause=str(cause), exit_code=code, agent_id="a1", **kw)  # type: ignore[arg-type]


def run(
    f: FailureFacts,
    inline: RetryPolicy | None = None,
    named: tuple[NamedPolicy, ...] = (),
    cluster: ClusterRetry = ClusterRetry(),
    c: Chain | None = None,
    kind: SessionType = SessionType.BATCH,
) -> tuple[Verdict, bool, float, str]:
    d = decide(
        session_type=kind, facts=f, inline=inline, named=named, cluster=cluster, chain=c or chain(), now=NOW
    )
    return d.verdict, d.counted, d.delay, d.reason


# ---- delays


def test_deterministic_jitter_reproduces_the_design_test_vector() -> None:
    p = RetryPolicy(
        retry_delay=10, backoff=Backoff.EXPONENTIAL, backoff_multiplier=2, jitter=Jitter.DETERMINISTIC
    )
    got = [inline_delay(p, n, ROOT) for n in (1, 2, 3)]
    assert got == pytest.approx([11.4465, 20.097224, 43.731263], abs=1e-6)
    assert got == [inline_delay(p, n, ROOT) for n in (1, 2, 3)]  # reproducible


def test_exponential_backoff_is_capped_and_fixed_is_flat() -> None:
    exact = Jitter.NONE  # the default (deterministic) spreads each delay by up to 25%
    p = RetryPolicy(
        retry_delay=1, backoff=Backoff.EXPONENTIAL, backoff_multiplier=3, max_retry_delay=20, jitter=exact
    )
    assert [inline_delay(p, n, ROOT) for n in (1, 2, 3, 4, 50, 10_000)] == [1, 3, 9, 20, 20, 20]
    assert [inline_delay(RetryPolicy(retry_delay=7, jitter=exact), n, ROOT) for n in (1, 5)] == [7, 7]
    assert RetryPolicy().jitter is Jitter.DETERMINISTIC


@given(st.integers(1, 30), st.floats(0, 1))
def test_random_jitter_stays_in_its_band(n: int, ratio: float) -> None:
    p = RetryPolicy(retry_delay=10, jitter=Jitter.RANDOM, jitter_ratio=ratio, max_retry_delay=3600)
    d = inline_delay(p, n, ROOT, random.Random(n))
    assert 10 <= d <= 10 * (1 + ratio)


def test_named_backoff_grows_with_the_rules_own_count() -> None:
    b = RuleBackoff(initial_delay=2, max_delay=30, multiplier=3)
    assert [b.delay(k) for k in (1, 2, 3, 4)] == [2, 6, 18, 30]
    rule = Rule(RuleAction.RETRY, on_conditions=frozenset({Condition.OOM_KILLED}), backoff=b)
    pol = NamedPolicy("p", (rule,))
    oom = facts(Cause.OOM_KILLED, 137, conditions=frozenset({Condition.OOM_KILLED}))
    assert run(oom, named=(pol,), c=chain(**{"p#0": 2}))[2] == 18


# ---- evaluation order


@pytest.mark.parametrize("cause", [Cause.USER_CANCELLED, Cause.VALIDATION_ERROR, Cause.QUOTA_EXCEEDED])
def test_never_set_always_fails_even_with_a_catch_all_rule(cause: Cause) -> None:
    catch_all = NamedPolicy("all", (Rule(RuleAction.RETRY),))
    assert run(facts(cause), RetryPolicy(max_retries=5), (catch_all,))[0] is Verdict.FAIL


def test_only_batch_sessions_retry() -> None:
    v = run(facts(), RetryPolicy(max_retries=3), kind=SessionType.INTERACTIVE)
    assert v[0] is Verdict.FAIL and "not retried" in v[3]


@pytest.mark.parametrize("cluster", [ClusterRetry(enabled=False), ClusterRetry(global_max_retries=0)])
def test_kill_switch_fails_everything(cluster: ClusterRetry) -> None:
    assert run(facts(), RetryPolicy(max_retries=3), cluster=cluster)[0] is Verdict.FAIL
    assert run(facts(Cause.PREEMPTED, None), cluster=cluster)[0] is Verdict.FAIL


def test_global_cap_exhausts_counted_retries_only() -> None:
    cluster = ClusterRetry(global_max_retries=4)
    assert run(facts(), RetryPolicy(max_retries=10), cluster=cluster, c=chain(4))[0] is Verdict.EXHAUSTED
    capped = decide(
        session_type=SessionType.BATCH,
        facts=facts(),
        inline=RetryPolicy(max_retries=10),
        named=[],
        cluster=cluster,
        chain=chain(4),
        now=NOW,
    )
    assert (
        capped.reason == "not retried: the chain used all 4 retries the cluster allows (global_max_retries)"
    )
    assert run(facts(), RetryPolicy(max_retries=10), cluster=cluster, c=chain(3))[0] is Verdict.RETRY
    # A preemption requeue is free: it spends neither budget nor the global count.
    v = run(facts(Cause.PREEMPTED, None), cluster=cluster, c=chain(4))
    assert (v[0], v[1]) == (Verdict.RETRY, False)


def test_inline_budget_and_eligible_causes() -> None:
    p = RetryPolicy(max_retries=2, retry_delay=0)
    assert run(facts(), p, c=chain(0))[:3] == (Verdict.RETRY, True, 0.0)
    assert run(facts(), p, c=chain(1))[0] is Verdict.RETRY
    assert run(facts(), p, c=chain(2))[0] is Verdict.EXHAUSTED
    assert run(facts(), RetryPolicy())[0] is Verdict.FAIL  # max_retries 0: nothing asked
    # deadline_exceeded is not a default retry cause; --retry-on replaces the set.
    assert run(facts(Cause.DEADLINE_EXCEEDED, None), p)[0] is Verdict.FAIL
    only_oom = replace(p, eligible_causes=frozenset({Cause.OOM_KILLED}))
    assert run(facts(), only_oom)[0] is Verdict.FAIL
    assert run(facts(Cause.OOM_KILLED, 137), only_oom)[0] is Verdict.RETRY


def test_recoverable_flag_overrides_the_cause_rules_for_the_inline_policy() -> None:
    p = RetryPolicy(max_retries=2, eligible_causes=frozenset({Cause.OOM_KILLED}))
    assert run(facts(recoverable=True), p)[0] is Verdict.RETRY
    assert run(facts(Cause.OOM_KILLED, 137, recoverable=False), p)[0] is Verdict.FAIL


def test_time_budget_counts_from_the_first_start() -> None:
    p = RetryPolicy(max_retries=5, retry_delay=30, max_retry_duration=100)
    started = Chain(ROOT, 1, 1, {}, NOW - timedelta(seconds=60))
    assert run(facts(), p, c=started)[0] is Verdict.RETRY
    late = Chain(ROOT, 1, 1, {}, NOW - timedelta(seconds=80))
    v = run(facts(), p, c=late)
    assert v[0] is Verdict.EXHAUSTED and "max_retry_duration" in v[3]


# ---- named policies (the acceptance policy of the issue, rule by rule)

ACCEPTANCE = policy_from(
    "acceptance",
    {
        "default_action": "fail",
        "rules": [
            {"action": "retry", "on_exit_codes": {"operator": "In", "values": [137, 75]}, "retry_limit": 2},
            {"action": "fail", "on_exit_codes": {"operator": "In", "values": [1]}},
            {"action": "retry", "on_conditions": ["oom_killed"], "retry_limit": 1},
        ],
    },
)


def test_acceptance_policy_rule_by_rule() -> None:
    named = (ACCEPTANCE,)
    v = run(facts(code=75), named=named)
    assert v[0] is Verdict.RETRY and "rule 1" in v[3]
    assert run(facts(code=75), named=named, c=chain(**{"acceptance#0": 2}))[0] is Verdict.EXHAUSTED
    assert run(facts(code=1), named=named, inline=RetryPolicy(max_retries=5))[0] is Verdict.FAIL
    # An OOM-killed kernel exits 137, so the first rule (exit codes) is the one that matches it.
    oom = facts(Cause.OOM_KILLED, 137, conditions=frozenset({Condition.OOM_KILLED}))
    assert "rule 1" in run(oom, named=named)[3]
    watchdog = facts(Cause.OOM_KILLED, None, conditions=frozenset({Condition.OOM_KILLED}))
    assert "rule 3" in run(watchdog, named=named)[3]
    assert run(watchdog, named=named, c=chain(**{"acceptance#2": 1}))[0] is Verdict.EXHAUSTED
    # Nothing matched and the default is fail: the inline policy decides (none here).
    assert run(facts(code=3), named=named)[0] is Verdict.FAIL


def test_rule_counters_are_independent_but_share_the_global_cap() -> None:
    cluster = ClusterRetry(global_max_retries=3)
    c = Chain(ROOT, 0, 3, {"acceptance#0": 1})
    assert run(facts(code=75), named=(ACCEPTANCE,), cluster=cluster, c=c)[0] is Verdict.EXHAUSTED


def test_matchers_are_anded_and_exit_zero_or_missing_never_match() -> None:
    rule = Rule(
        RuleAction.RETRY,
        on_exit_codes=(CodeOperator.NOT_IN, frozenset({1})),
        on_termination_message=r"TRANSIENT",
    )
    pol = NamedPolicy("p", (rule,))
    assert run(facts(code=3, message="x TRANSIENT y"), named=(pol,))[0] is Verdict.RETRY
    assert run(facts(code=3, message="fatal"), named=(pol,))[0] is Verdict.FAIL
    assert run(facts(code=None, message="TRANSIENT"), named=(pol,))[0] is Verdict.FAIL
    assert run(facts(code=0, message="TRANSIENT"), named=(pol,))[0] is Verdict.FAIL


def test_default_action_retry_and_ignore_rules() -> None:
    pol = NamedPolicy("d", (), retry_limit=1, default_action=DefaultAction.RETRY)
    assert run(facts(code=9), named=(pol,))[:2] == (Verdict.RETRY, True)
    assert run(facts(code=9), named=(pol,), c=chain(**{"d#default": 1}))[0] is Verdict.EXHAUSTED
    ignore = NamedPolicy("i", (Rule(RuleAction.IGNORE, on_exit_codes=(CodeOperator.IN, frozenset({9}))),))
    assert run(facts(code=9), named=(ignore,), c=chain(50))[:2] == (Verdict.RETRY, False)


def test_free_retries_are_bounded() -> None:
    ignore = NamedPolicy("i", (Rule(RuleAction.IGNORE),))
    looped = Chain(ROOT, 0, 0, {}, None, FREE_CEILING)
    assert run(facts(), named=(ignore,), c=looped)[0] is Verdict.EXHAUSTED
    assert run(facts(Cause.PREEMPTED, None), c=looped)[0] is Verdict.EXHAUSTED


def test_preempted_is_free_unless_a_rule_matches_it() -> None:
    assert run(facts(Cause.PREEMPTED, None))[:2] == (Verdict.RETRY, False)
    stop = NamedPolicy("s", (Rule(RuleAction.FAIL, on_conditions=frozenset({Condition.PREEMPTED})),))
    pre = facts(Cause.PREEMPTED, None, conditions=frozenset({Condition.PREEMPTED}))
    assert run(pre, named=(stop,))[0] is Verdict.FAIL


def test_anti_affinity_names_the_root_cause_agent() -> None:
    d = decide(
        session_type=SessionType.BATCH,
        facts=facts(),
        inline=RetryPolicy(max_retries=1, anti_affinity=AntiAffinity.NODE),
        named=(),
        cluster=ClusterRetry(),
        chain=chain(),
        now=NOW,
    )
    assert d.avoid_agent == "a1"


def test_bad_regex_is_refused_with_its_field() -> None:
    with pytest.raises(PolicyError) as err:
        policy_from("bad", {"rules": [{"action": "retry", "on_termination_message": {"pattern": "(("}}]})
    assert err.value.field == "spec.rules.0.on_termination_message.pattern"


# ---- failure categories and the message


def test_default_categories_first_match_wins() -> None:
    rules = categories_from(DEFAULT_CATEGORIES)
    assert categorise(rules, facts(log_tail="RuntimeError: CUDA out of memory. Tried")) == {"cuda_oom"}
    assert categorise(rules, facts(log_tail="NCCL error in: x")) == {"nccl_error"}
    assert categorise(rules, facts(conditions=frozenset({Condition.OOM_KILLED}))) == {"host_oom"}
    assert categorise(rules, facts(log_tail="all fine")) == frozenset()


def test_termination_message_prefers_the_log_then_the_record_then_the_tail() -> None:
    assert termination_message("T\n", "R", "L") == "T"
    assert termination_message("  ", "R", "L") == "R"
    assert termination_message(None, None, "L") == "L"


def test_shown_retry_state_follows_the_latest_attempt() -> None:
    first = AttemptBrief(1, "ERROR", "failure", "scheduled")
    assert shown_retry_state(first, [first, AttemptBrief(2, "PENDING", "undefined", None)]) == "scheduled"
    assert shown_retry_state(first, [first, AttemptBrief(2, "RUNNING", "undefined", None)]) == "running"
    assert (
        shown_retry_state(first, [first, AttemptBrief(2, "TERMINATED", "success", "succeeded")])
        == "succeeded"
    )
    done = AttemptBrief(2, "ERROR", "failure", "exhausted")
    assert shown_retry_state(first, [first, done]) == "exhausted"
    assert shown_retry_state(done, [first, done]) == "exhausted"
    alone = AttemptBrief(1, "TERMINATED", "success", "none")
    assert shown_retry_state(alone, [alone]) == "none"
    assert shown_retry_state(AttemptBrief(1, "RUNNING", "undefined", None), []) == "none"


def test_remaining_counts_the_deciding_limit_and_the_global_cap() -> None:
    def remaining(**kw: object) -> int | None:
        return decide(
            session_type=SessionType.BATCH,
            facts=facts(code=75),
            inline=kw.get("inline"),  # type: ignore[arg-type]
            named=kw.get("named", ()),  # type: ignore[arg-type]
            cluster=kw.get("cluster", ClusterRetry()),  # type: ignore[arg-type]
            chain=kw.get("chain", chain()),  # type: ignore[arg-type]
            now=NOW,
        ).remaining

    assert remaining(inline=RetryPolicy(max_retries=3)) == 2
    assert remaining(named=(ACCEPTANCE,)) == 1  # rule 1: limit 2, this is the first
    assert remaining(inline=RetryPolicy(max_retries=9), cluster=ClusterRetry(global_max_retries=3)) == 2
    assert remaining(inline=RetryPolicy(max_retries=9), chain=chain(1, total=18)) == 1


def test_a_catch_all_rule_leaves_preemption_free() -> None:
    catch_all = NamedPolicy("all", (Rule(RuleAction.FAIL),))
    assert run(facts(Cause.PREEMPTED, None), named=(catch_all,))[:2] == (Verdict.RETRY, False)
    assert run(facts(code=3), named=(catch_all,))[0] is Verdict.FAIL


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("retry.enabled", "yes"),
        ("retry.global_max_retries", "twenty"),
        ("retry.global_max_retries", True),
        ("retry.dispatch_rate", "fast"),
        ("retry.defaults", {"max_retries": "many"}),
        ("failure_categories", [{"name": "x", "on_log_tail": {"pattern": "("}}]),
    ],
)
def test_stored_settings_that_cannot_be_used_name_themselves(key: str, value: object) -> None:
    with pytest.raises(PolicyError) as err:
        settings_of({**values_of({}), key: value})
    assert err.value.field.startswith(key.split(".")[0])


def test_a_retry_held_by_the_storm_guard_says_when_and_why() -> None:
    d = Decision(Verdict.RETRY, "kernel_nonzero_exit is retried (1 of 3), retrying at once", delay=0.0)
    later = held(d, 2.94, 1.0)
    assert later.delay == 2.94
    assert later.reason == (
        "kernel_nonzero_exit is retried (1 of 3), retrying in 2.9 s"
        " (held by the cluster's dispatch_rate of 1/s)"
    )
    assert held(d, 0.0, 1.0) == d  # its slot was free: nothing held it


def _gang(root_role: str, root_code: int, other_role: str, other_code: int) -> FailureFacts:
    """A failed gang: the root cause (its code on the attempt) and another kernel failing on its own."""
    return facts(
        code=root_code,
        kernels=(KernelFacts(root_role, root_code), KernelFacts(other_role, other_code, message="disk full")),
    )


def _on(role: str, code: int, action: RuleAction = RuleAction.FAIL) -> NamedPolicy:
    return NamedPolicy(
        "roles", (Rule(action, on_exit_codes=(CodeOperator.IN, frozenset({code})), kernel_role=role),)
    )


@pytest.mark.parametrize(
    ("root", "other"), [(("main", 5), ("sub", 3)), (("sub", 3), ("main", 5))], ids=["main-root", "sub-root"]
)
def test_a_rule_with_a_kernel_role_looks_at_the_kernels_of_that_role(
    root: tuple[str, int], other: tuple[str, int]
) -> None:
    """Armada's containerName: the rule for a role considers that role's kernels, whichever is the
    root cause: its exit codes, conditions and messages."""
    f = _gang(*root, *other)
    retry = RetryPolicy(max_retries=3, retry_delay=0)
    other_role, other_code = other
    assert run(f, retry, (_on(other_role, other_code),))[0] is Verdict.FAIL  # the other kernel's code
    assert run(f, retry, (_on(root[0], root[1]),))[0] is Verdict.FAIL  # the root cause's own
    assert run(f, retry, (_on(other_role, root[1]),))[0] is Verdict.RETRY  # that role never exited so
    by_message = NamedPolicy(
        "msg", (Rule(RuleAction.FAIL, on_termination_message="disk full", kernel_role=other_role),)
    )
    assert run(f, retry, (by_message,))[0] is Verdict.FAIL
    without_role = NamedPolicy(
        "plain", (Rule(RuleAction.FAIL, on_exit_codes=(CodeOperator.IN, frozenset({other_code}))),)
    )
    assert run(f, retry, (without_role,))[0] is Verdict.RETRY  # no role: the root cause's code only


def test_the_clusters_default_backoff_fills_what_policies_leave_out() -> None:
    settings = settings_of(values_of({"retry.default_backoff": {"initial_delay": 2, "max_delay": 30}}))
    assert settings.default_backoff == RuleBackoff(initial_delay=2, max_delay=30, multiplier=2.0)
    bare = policy_from(
        "bare",
        {"rules": [{"action": "retry"}, {"action": "retry", "backoff": {"multiplier": 3}}]},
        settings.default_backoff,
    )
    assert bare.backoff == settings.default_backoff
    assert bare.rules[1].backoff == RuleBackoff(initial_delay=2, max_delay=30, multiplier=3)
    assert settings_of(values_of({})).default_backoff == RuleBackoff(0.0, 600.0, 2.0)  # Armada's
    for bad in ({"multiplier": 0}, {"max_delay": 10**9}, {"initial_delay": "soon"}, {"x": 1}):
        with pytest.raises(PolicyError) as err:
            settings_of(values_of({"retry.default_backoff": bad}))
        assert err.value.field.startswith("retry.default_backoff.")
    with pytest.raises(PolicyError):
        settings_of(values_of({"retry.default_policy": 7}))
