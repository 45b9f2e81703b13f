"""Real PyTorch (CPU build, gloo): the root cause of a failed 3-rank job is the rank that raised,
with its message, whichever rank it is and whether or not it used torch's @record (DESIGN §4).
On SQLite only: aggregation never touches the store, and each run costs seconds."""

from __future__ import annotations

import asyncio
import random
import sysconfig
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.domain.final import failure_records
from corral.domain.root_cause import aggregate
from corral.domain.spec import ErrorStrategy
from corral.store import sessions
from corral.store.dialect.engine import make_engine
from tests.support.cluster import Cluster

JOB = Path(__file__).resolve().parents[2] / "support" / "torch_job.py"
# Kernels run as the unprivileged `corral` account, which cannot reach this interpreter when it lives
# in root's home (pyenv): they run the system's `python3` of the same version with our packages, as
# a job would use a shared environment.
SITE_PACKAGES = sysconfig.get_paths()["purelib"]


def test_torch_is_the_cpu_build() -> None:
    import torch

    assert torch.version.cuda is None
    assert torch.distributed.is_gloo_available()


@pytest.fixture(scope="module")
def torch_cluster(
    fresh_database: Callable[[str], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    c = Cluster(fresh_database("sqlite"), Path(tmp_path_factory.mktemp("torch")))
    try:
        c.start_manager()
        c.start_agent("local-1", cpu=2)
        c.start_agent("local-2", cpu=2)
        yield c
    finally:
        c.close()


def stored_kernels(database_url: str, session_id: str) -> list[Any]:
    async def go() -> list[Any]:
        engine = make_engine(database_url)
        try:
            async with engine.connect() as conn:
                found = await sessions.get(conn, session_id)
                assert found is not None
                return [k.outcome() for k in found.kernels]
        finally:
            await engine.dispose()

    return asyncio.run(go())


@pytest.mark.parametrize("with_record", [True, False], ids=["torch-record", "synthesized"])
@pytest.mark.parametrize("fail_rank", [0, 1, 2])
def test_the_rank_that_raised_is_the_root_cause(
    torch_cluster: Cluster, fail_rank: int, with_record: bool
) -> None:
    command = ["python3", str(JOB), *(["--record"] if with_record else [])]
    s = torch_cluster.submit(
        command=command,
        cluster_size=3,
        resources={"cpu": 0.5},
        env={"FAIL_RANK": str(fail_rank), "PYTHONPATH": SITE_PACKAGES},
    )
    done = torch_cluster.wait(s["id"], timeout=120)
    rc = done["root_cause"]
    assert done["status"] == "ERROR" and rc is not None, done
    assert (rc["rank"], rc["worker"], rc["type"]) == (fail_rank, f"rank-{fail_rank}", "ValueError"), rc
    assert rc["message"] == f"bad batch at step 2 on rank {fail_rank}"
    assert rc["strategy"] == "earliest_primary"
    assert (rc["source"], rc["resolution"]) == (("torch", "s") if with_record else ("synthesized", "ns"))
    errors = torch_client_errors(torch_cluster, s["id"])
    assert errors[0]["rank"] == fail_rank and errors[0]["primary"]
    # The peers' records (when they failed before Corral stopped them) are gloo side effects.
    assert all(not e["primary"] for e in errors[1:]), errors

    # Determinism: the records this run captured, in any order, give the same answer.
    records = failure_records(stored_kernels(torch_cluster.database_url, s["id"]))
    rnd = random.Random(fail_rank)
    for _ in range(100):
        rnd.shuffle(records)
        found = aggregate(records, ErrorStrategy.EARLIEST_PRIMARY)
        assert found is not None and found.record.rank == fail_rank


def torch_client_errors(c: Cluster, session_id: str) -> list[dict[str, Any]]:
    return list(c.http.get(f"/api/v1/sessions/{session_id}/errors").json())
