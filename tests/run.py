"""Runs the whole suite; "no tests collected" (pytest exit 5) is a failure, never green."""

from __future__ import annotations

import os
import subprocess
import sys

# Most tests wait on real processes (agents, kernels, PostgreSQL) more than they compute: one worker
# more than the cores keeps the machine busy (2 cores: 27 min one after another, under 10 with 3 workers).
# CORRAL_TEST_WORKERS=0 runs them in this process, one after another: the default with a
# CORRAL_TEST_PG_DSN, whose one database every PostgreSQL test would share at once.
default = "0" if os.environ.get("CORRAL_TEST_PG_DSN") else str(min(8, (os.cpu_count() or 1) + 1))
workers = os.environ.get("CORRAL_TEST_WORKERS") or default
parallel = ["-n", workers] if workers != "0" else []
pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=10"]
code = subprocess.call([*pytest, *parallel, *sys.argv[1:]])
if code == 5:
    print("pytest collected no tests: failing the run", file=sys.stderr)
    code = 1
sys.exit(code)
