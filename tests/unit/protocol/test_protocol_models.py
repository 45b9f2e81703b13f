"""The agent protocol's models: values (frozen), unknown fields refused both ways (by the manager
reading a request, by the agent reading a reply), and every message survives its JSON unchanged."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from corral.agent.client import Rejected, _read, _wire
from corral.agent.events import EVENTS, Exited, FencedAll, Started
from corral.domain.records import KernelReport
from corral.domain.status import KernelStatus
from corral.protocol.logs import LogShipment, LogsShipped
from corral.protocol.messages import HealthIn, HealthOut, LeaveIn, RegisterIn, RegisterOut
from corral.protocol.orders import KernelOrder, KernelSpec, OrdersIn, OrdersOut, RunAs
from corral.protocol.reports import DETAILS, KernelReportIn, ReportsIn, ReportsOut, to_record

SPEC = KernelSpec(
    session_name="train",
    command=("python3", "-c", "print(1)"),
    env={"A": "1"},
    image=None,
    workdir="/tmp",
    resources={"cpu": "0.5", "mem": "67108864"},
    cluster_size=2,
    rank=0,
    role="main",
    hosts=("10.0.0.1", "10.0.0.2"),
    master_addr="10.0.0.1",
    master_port=None,
    pick_master_port=True,
    start_at_once=False,
    attempt=1,
    resume_count=0,
    array_id=None,
    array_index=None,
    max_attempts=3,
    checkpoint_dir=None,
    error_strategy="single",
    gpu_devices=(0, 1),
    worker_name="rank-0",
    root_session_id="s1",
    timeout_grace=10.0,
    run_as=RunAs(uid=1001),
)
ORDER = KernelOrder(
    kernel_id="k1",
    session_id="s1",
    rank=0,
    generation=2,
    status=KernelStatus.PREPARING,
    kill=False,
    spec=SPEC,
)
REPORT = KernelReportIn(
    kernel_id="k1",
    status=KernelStatus.ERROR,
    generation=2,
    exit_code=137,
    signal=9,
    oom_killed=True,
    exited_at_ns=1_700_000_000_000_000_000,
    master_port=29500,
    termination_message="killed",
    error_record={"message": "out of memory"},
    detail={"uid": 1001},
    output_done=True,
)
REQUESTS: list[BaseModel] = [
    RegisterIn(agent_id="a", hostname="h", address="127.0.0.1", capacity={"cpu": 4, "mem": "8G"}),
    HealthIn(agent_id="a", epoch=1, schedulable=False, unschedulable_reason="no cgroups"),
    LeaveIn(agent_id="a", epoch=1),
    OrdersIn(agent_id="a", epoch=1, seen="f", wait=5.0, started=["k1.2"]),
    ReportsIn(
        agent_id="a", epoch=1, reports=[REPORT, KernelReportIn(kernel_id="k2", status=KernelStatus.RUNNING)]
    ),
]
REPLIES: list[BaseModel] = [
    RegisterOut(
        epoch=1, agent_lease=15, fence_timeout=30, heartbeat_interval=3, long_poll=5, log_cap=1 << 20
    ),
    HealthOut(schedulable=True),
    OrdersOut(fingerprint="f", orders=[ORDER, ORDER.model_copy(update={"spec": None})], recorded=True),
    ReportsOut(applied=1, refused=["k2"], recorded=False),
    LogsShipped(stored=True, recorded=True),
    LogShipment(agent_id="a", epoch=1, kernel_id="k1", generation=2, stream="stderr", offset=10, eof=True),
]
ALL = REQUESTS + REPLIES


def _ids(models: list[BaseModel]) -> list[str]:
    return [type(m).__name__ for m in models]


@pytest.mark.parametrize("message", ALL, ids=_ids(ALL))
def test_a_message_survives_its_json(message: BaseModel) -> None:
    model = type(message)
    assert model.model_validate_json(message.model_dump_json()) == message
    # As the agent's client sends it: fields at their defaults left out.
    assert model.model_validate(_wire(message)) == message


@pytest.mark.parametrize("message", ALL, ids=_ids(ALL))
def test_an_unknown_field_is_refused(message: BaseModel) -> None:
    with pytest.raises(ValidationError) as refused:
        type(message).model_validate({**message.model_dump(mode="json"), "surprise": 1})
    assert refused.value.errors()[0]["type"] == "extra_forbidden"


@pytest.mark.parametrize("message", ALL, ids=_ids(ALL))
def test_a_message_is_frozen(message: BaseModel) -> None:
    name = next(iter(type(message).model_fields))
    with pytest.raises(ValidationError):
        setattr(message, name, getattr(message, name))


@pytest.mark.parametrize(
    ("part", "doc"),
    [
        ("order", {"orders": [{**ORDER.model_dump(mode="json"), "surprise": 1}]}),
        (
            "spec",
            {"orders": [{**ORDER.model_dump(mode="json"), "spec": {**SPEC.model_dump(mode="json"), "x": 1}}]},
        ),
    ],
)
def test_the_agent_refuses_a_reply_with_an_unknown_field_anywhere(part: str, doc: dict[str, Any]) -> None:
    with pytest.raises(Rejected, match="unreadable reply"):
        _read(OrdersOut, {"fingerprint": "f", "recorded": True, **doc})


def test_a_report_becomes_the_domain_record_field_for_field() -> None:
    """The wire's report and the domain's record declare the same fields: the one conversion
    (to_record) carries each."""
    fields = [f.name for f in dataclasses.fields(KernelReport)]
    assert fields == list(KernelReportIn.model_fields)
    record = to_record(REPORT)
    assert {f: getattr(record, f) for f in fields} == {f: getattr(REPORT, f) for f in fields}


def test_a_report_without_details_keeps_what_ends_the_kernel() -> None:
    bare = REPORT.without_details()
    assert (bare.termination_message, bare.error_record, bare.detail) == (None, None, {})
    kept = set(KernelReportIn.model_fields) - DETAILS
    assert {f: getattr(bare, f) for f in kept} == {f: getattr(REPORT, f) for f in kept}


def test_the_spec_reads_its_limits() -> None:
    assert (SPEC.mem_limit(), SPEC.cpus()) == (64 << 20, 0.5)
    unlimited = SPEC.model_copy(update={"resources": {"gpu": "1"}})
    assert (unlimited.mem_limit(), unlimited.cpus()) == (0, 0.0)


def test_supervisor_events_are_read_into_their_types() -> None:
    assert EVENTS.validate_json(b'{"ev": "started", "key": "k1.2", "pid": 7}') == Started(key="k1.2", pid=7)
    assert EVENTS.validate_json(b'{"ev": "fenced", "kernels": 2}') == FencedAll(kernels=2)
    line = b'{"ev": "exited", "key": "k1.2", "exit_code": 1, "cpu_mode": "watchdog", "cgroup": null}'
    exited = EVENTS.validate_json(line)
    assert isinstance(exited, Exited) and exited.exit_code == 1
    assert exited.detail() == {"cpu_mode": "watchdog"}
    with pytest.raises(ValidationError):
        EVENTS.validate_json(b'{"ev": "unheard-of", "key": "k1.2"}')
