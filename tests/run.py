"""Runs the whole suite; "no tests collected" (pytest exit 5) is a failure, never green.

Most tests wait on real processes (agents, kernels, PostgreSQL) more than they compute, so they run
in parallel (pytest-xdist), one worker more than the cores: 27 min one after another on a 2-core
machine, about 10 this way.  Tests marked `serial` measure time or CPU share, which other tests'
load would skew: they run afterwards, alone.  CORRAL_TEST_WORKERS=N sets the workers; 0 runs
everything in one process, the only way with a CORRAL_TEST_PG_DSN (its one database would be
shared by tests running at once).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

KEEP_BYTES = 50 * 2**20
"""What a failed run keeps of its temp tree, at most: its logs (pytest itself removes the directories
of tests that passed: tmp_path_retention_policy)."""
BIG_FILE = 2**20
MAX_WORKERS = 64
"""Each worker starts a PostgreSQL and clusters of its own: more would only exhaust the machine."""


def workers() -> int:
    given = os.environ.get("CORRAL_TEST_WORKERS", "")
    dsn = bool(os.environ.get("CORRAL_TEST_PG_DSN"))
    if not given:
        return 0 if dsn else min(8, (os.cpu_count() or 1) + 1)
    try:
        n = int(given)
    except ValueError:
        sys.exit(f"CORRAL_TEST_WORKERS must be a whole number, not {given!r}")
    if not 0 <= n <= MAX_WORKERS:
        sys.exit(f"CORRAL_TEST_WORKERS must be 0 to {MAX_WORKERS}, not {n}")
    if n and dsn:
        sys.exit(
            "CORRAL_TEST_PG_DSN is one database, which tests running at once would share: "
            "unset CORRAL_TEST_WORKERS"
        )
    return n


def main() -> int:
    n = workers()
    # A temp tree of the suite's own: kernels run as the `corral` account and must traverse to
    # their dirs, and any other pytest of this user resets pytest-of-<user> to mode 700.
    root = Path(tempfile.mkdtemp(prefix="corral-tests-"))
    root.chmod(0o711)
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=10"]
    if n == 0:
        passes = [[*pytest, "--basetemp", str(root / "all")]]
    else:
        passes = [
            [*pytest, "-n", str(n), "-m", "not serial", "--basetemp", str(root / "parallel")],
            [*pytest, "-m", "serial", "--basetemp", str(root / "serial")],
        ]
    codes = [subprocess.call([*cmd, *sys.argv[1:]]) for cmd in passes]
    if all(code == 5 for code in codes):
        print("pytest collected no tests: failing the run", file=sys.stderr)
        return 1
    failed = [code for code in codes if code not in (0, 5)]
    if not failed:
        shutil.rmtree(root, ignore_errors=True)
    else:
        kept = prune(root)
        print(f"the failed tests' logs are kept in {root} ({kept / 2**20:.1f} MiB)", file=sys.stderr)
    return failed[0] if failed else 0


def prune(root: Path, budget: int = KEEP_BYTES) -> int:
    """Keep the logs (and small files) of a failed run, within `budget` bytes: databases, kernel
    output and other big files go, and the longest logs are cut to their tails."""
    logs: list[tuple[int, Path]] = []
    for path in root.rglob("*"):
        try:
            if path.is_symlink() or not path.is_file():
                continue
            size = path.stat().st_size
            if path.suffix == ".log" or size <= BIG_FILE:
                logs.append((size, path))
            else:
                path.unlink()
        except OSError:
            continue
    # The smallest logs are kept whole, the largest cut to their tails: each gets an equal share of
    # what the smaller ones left.
    logs.sort()
    left = budget
    for n, (size, path) in enumerate(logs):
        share = left // (len(logs) - n)
        if size > share:
            with path.open("rb") as f:
                f.seek(size - share)
                tail = f.read()
            path.write_bytes(tail)
        left -= min(size, share)
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


if __name__ == "__main__":
    sys.exit(main())
