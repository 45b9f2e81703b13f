"""Log shipping: one kernel writes SIZE MiB to stdout as fast as it can; prints how fast its
output reaches the manager, and how long after the kernel's exit its session ended and its
output was complete.

    .venv/bin/python bench/logs.py [--mib 200] [--database-url postgresql+asyncpg://...]
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import add_database_options, database, machine, scratch  # noqa: E402
from tests.support.cluster import Cluster, poll  # noqa: E402

WRITER = (
    "import sys, time; open({start!r}, 'w').write(repr(time.time()))\n"
    "line = b'x' * 1023 + b'\\n'; w = sys.stdout.buffer.write\n"
    "for _ in range({n}): w(line)\n"
    "sys.stdout.flush(); open({end!r}, 'w').write(repr(time.time()))"
)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mib", type=int, default=200, help="MiB the kernel writes")
    add_database_options(parser)
    args = parser.parse_args()
    databases = ExitStack()
    work = scratch("corral-bench-logs-", databases)
    url = databases.enter_context(database(args, work))
    cluster = Cluster(url, work, env={"CORRAL_LOOP_INTERVAL": "0.2"})
    try:
        cluster.start_manager()
        cluster.start_agent("bench", cpu=2)
        start, end = work / "start", work / "end"
        code = WRITER.format(n=args.mib * 1024, start=str(start), end=str(end))
        s = cluster.submit(command=["python3", "-c", code])
        final = cluster.wait(s["id"], timeout=600)

        def complete() -> float | None:
            kernels = cluster.session(s["id"])["kernels"]
            return time.time() if all(k["output_complete"] for k in kernels) else None

        done = float(poll(complete, 600, "the output to be complete", interval=0.02))
        began, exited = float(start.read_text()), float(end.read_text())
        ended = datetime.fromisoformat(final["terminated_at"]).timestamp()
        size, wrote = args.mib, exited - began
        print(machine(url))
        print(f"kernel wrote               {size} MiB in {wrote:.2f} s ({size / wrote:.0f} MiB/s)")
        print(f"shipped                    {size / (done - began):.0f} MiB/s (first byte written -> stored)")
        print(f"session ended              {ended - exited:.2f} s after the kernel exited")
        print(f"output complete            {done - exited:.2f} s after the kernel exited")
    finally:
        cluster.close()
        databases.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
