"""tests/run.py: what a failed run keeps of its temp tree."""

from __future__ import annotations

from pathlib import Path

from tests.run import prune

MIB = 2**20


def test_a_failed_run_keeps_its_logs_tails_within_the_budget(tmp_path: Path) -> None:
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "corral.db").write_bytes(b"d" * 3 * MIB)
    (tmp_path / "cluster" / "manager.log").write_bytes(b"m" * 40 * MIB + b"the end of the manager's log")
    (tmp_path / "agent.log").write_bytes(b"a" * 30 * MIB)
    (tmp_path / "short.log").write_bytes(b"a short log")
    kept = prune(tmp_path, 50 * MIB)
    assert kept <= 50 * MIB
    assert not (tmp_path / "cluster" / "corral.db").exists()
    assert (tmp_path / "short.log").read_bytes() == b"a short log"
    assert (tmp_path / "cluster" / "manager.log").read_bytes().endswith(b"the end of the manager's log")
    assert (tmp_path / "agent.log").stat().st_size > 20 * MIB
