"""Runs the whole suite; "no tests collected" (pytest exit 5) is a failure, never green."""

from __future__ import annotations

import subprocess
import sys

code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *sys.argv[1:]])
if code == 5:
    print("pytest collected no tests: failing the run", file=sys.stderr)
    code = 1
sys.exit(code)
