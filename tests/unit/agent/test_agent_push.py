"""Under load an agent's report pushes are spaced, so each carries a batch; one kernel's reports (an
idle cluster) go at once.  The agent's own push loop against a stand-in for the manager's HTTP side,
which records when each push arrived."""

from __future__ import annotations

import asyncio
import time

import pytest

import corral.agent.push as push_module
from corral.agent.agent import Agent
from corral.agent.settings import AgentSettings
from corral.domain.status import KernelStatus
from corral.protocol.reports import KernelReportIn, ReportsIn, ReportsOut
from tests.support.eventually import eventually


class Manager:
    """Takes every push and notes its time and the kernels it reported."""

    def __init__(self) -> None:
        self.pushes: list[tuple[float, list[str]]] = []

    async def reports(self, body: ReportsIn) -> ReportsOut:
        self.pushes.append((time.monotonic(), [r.kernel_id for r in body.reports]))
        return ReportsOut(applied=len(body.reports), refused=[], recorded=True)


def _report(kernel_id: str, status: KernelStatus) -> KernelReportIn:
    return KernelReportIn(kernel_id=kernel_id, generation=1, status=status)


async def _pushed(manager: Manager, count: int) -> None:
    await eventually(lambda: len(manager.pushes) >= count, f"{count} pushes", interval=0.005)


async def _pushing(first: list[str]) -> tuple[Agent, Manager, asyncio.Task[None]]:
    agent = Agent(AgentSettings(id="a1", token="t"))
    agent.epoch = 1
    manager = Manager()
    agent.client = manager  # type: ignore[assignment]
    for k in first:
        agent.push.queue(_report(k, KernelStatus.RUNNING))
    return agent, manager, asyncio.create_task(agent.push.run())


@pytest.mark.parametrize("kernels", [["k1", "k2"], ["k1"]])
async def test_pushes_after_several_kernels_are_spaced_and_after_one_are_not(
    kernels: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Spaced far apart when under load, so that a push sent at once after one kernel's reports
    # (within the 10 s deadline) cannot be mistaken for a spaced one.
    spacing = 0.3 if len(kernels) > 1 else 30.0
    monkeypatch.setattr(push_module, "REPORT_SPACING", spacing)
    agent, manager, task = await _pushing(kernels)
    try:
        await _pushed(manager, 1)
        agent.push.queue(_report("k3", KernelStatus.TERMINATED))
        await _pushed(manager, 2)
        (first, sent), (second, then) = manager.pushes
        assert sent == kernels and then == ["k3"]
        if len(kernels) > 1:
            assert second - first >= spacing  # the second waited for more to say
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
