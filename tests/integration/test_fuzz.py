"""schemathesis over /openapi.json on a real manager: no input gets a 5xx, every 4xx has the error
format.  User routes with a (non-admin) user's key, agent routes with the agent token, and the
admin-only routes a second time with the admin's key (so their validation is fuzzed, not only 403)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import hypothesis.strategies as st
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from tests.support.cluster import Cluster
from tests.support.tenants import add_user_in_own_project

EXAMPLES = 100
ADMIN_EXAMPLES = 30  # their shapes are few and small; the suite's time goes further elsewhere
ADMIN_ROUTES = (
    "/api/v1/cluster-config",
    "/api/v1/retry-policies",
    "/api/v1/projects",
    "/api/v1/audit",
    "/api/v1/users",
    "/api/v1/resource-groups",
)


def error_format(ctx: Any, response: Any, case: Any) -> None:
    """Every 4xx is {"error": {"code", "message", "details"}} (DESIGN §8)."""
    if 400 <= response.status_code < 500:
        body = response.json()
        assert set(body) == {"error"}, body
        assert {"code", "message", "details"} <= set(body["error"]), body


FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))


def fuzz(op: Any, http: requests.Session, headers: dict[str, str], examples: int = EXAMPLES) -> None:
    cases = st.one_of(op.as_strategy(GenerationMode.POSITIVE), op.as_strategy(GenerationMode.NEGATIVE))

    @seed(20261122)
    @settings(FUZZ, max_examples=examples)
    @given(case=cases)
    def run(case: Any) -> None:
        case.call_and_validate(
            session=http,
            headers=headers,
            checks=[not_a_server_error],
            additional_checks=[error_format],
            timeout=45,  # over the longest wait a route may be asked for (/events?wait=30)
        )

    run()


# Every operation x 100 examples (a few wait up to 30 s for an event by design): about 3 min on an
# idle 2-core machine, more on a busy one; the suite's 300 s per test is too tight for it.
@pytest.mark.timeout(900)
def test_no_input_gets_a_server_error(own_cluster: Callable[..., Cluster]) -> None:
    c = own_cluster()
    # No agent runs anything while the fuzz submits arbitrary commands: they stay queued.
    user_key = add_user_in_own_project(c.database_url, "fuzzer", "fuzz", also_default=True)
    schema = schemathesis.openapi.from_url(f"{c.url}/openapi.json", config=schemathesis.Config())
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 12
    http = requests.Session()
    for op in operations:
        key = c.token if op.path.startswith("/api/v1/agent/") else user_key
        fuzz(op, http, {"Authorization": f"Bearer {key}"})
        if op.path.startswith(ADMIN_ROUTES):
            fuzz(op, http, {"Authorization": f"Bearer {c.key}"}, ADMIN_EXAMPLES)
    # And after all of it, the cluster still serves: listing, and a real session end to end.
    assert c.http.get("/api/v1/sessions").status_code == 200
    c.start_agent("after", resource_group="after-the-fuzz")
    s = c.submit(command=["sh", "-c", "echo after-the-fuzz"], resource_group="after-the-fuzz")
    assert c.wait(s["id"], timeout=60)["result"] == "success"
