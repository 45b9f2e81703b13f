"""docs/client.md's worked example, run as written against a real Corral."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.cluster import Cluster

DOC = Path(__file__).resolve().parents[3] / "docs" / "client.md"


def example() -> str:
    section = DOC.read_text().split("## A worked example", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "docs/client.md has no python block under its worked example"
    return found.group(1)


def test_the_worked_example_runs_as_written(cluster: Cluster, tmp_path: Path) -> None:
    env = {**os.environ, "CORRAL_URL": cluster.url, "CORRAL_API_KEY": cluster.key}
    done = subprocess.run(
        [sys.executable, "-c", example()], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == "ERROR kernel_nonzero_exit", done.stdout
    assert lines[2].startswith("root cause: worker rank-1 on agent ") and "ValueError: bad batch" in lines[2]
    assert "ROOT CAUSE rank-1 ValueError" in lines
    assert lines[-1] == "422 validation_error cluster_size"
