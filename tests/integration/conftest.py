"""One shared embedded cluster per backend (2 agents, 2 CPUs each), plus a factory for tests that
need a cluster of their own (they kill agents or the manager)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import BACKENDS
from tests.support.cluster import Cluster


@pytest.fixture(scope="module", params=BACKENDS)
def cluster(
    request: pytest.FixtureRequest,
    fresh_database: Callable[[str], str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    backend = request.param
    c = Cluster(fresh_database(backend), Path(tmp_path_factory.mktemp(f"cluster-{backend}")))
    c.backend = backend  # type: ignore[attr-defined]
    try:
        c.start_manager()
        c.start_agent("agent-a", cpu=2)
        c.start_agent("agent-b", cpu=2)
        yield c
    finally:
        c.close()


@pytest.fixture(params=BACKENDS)
def own_cluster(
    request: pytest.FixtureRequest, fresh_database: Callable[[str], str], tmp_path: Path
) -> Iterator[Callable[..., Cluster]]:
    """A factory: `own_cluster(env={...})` gives a started manager with no agents yet."""
    made: list[Cluster] = []

    def make(env: dict[str, str] | None = None) -> Cluster:
        c = Cluster(fresh_database(request.param), tmp_path / f"c{len(made)}", env)
        made.append(c)
        c.start_manager()
        return c

    try:
        yield make
    finally:
        for c in made:
            c.close()
