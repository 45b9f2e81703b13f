"""The client against the shared real cluster (a manager and two agents, per backend)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from corral.client import Client
from tests.support.cluster import Cluster


@pytest.fixture
def corral(cluster: Cluster) -> Iterator[Client]:
    with Client(cluster.url, cluster.key) as c:
        yield c
