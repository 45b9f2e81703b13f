"""Root-cause aggregation time per session, for 1,000 and 10,000 worker records (DESIGN §4).

Mixed formats (torch elastic's whole-second records, corral.error/v1 nanosecond ones, synthesized
ones from log tails, unusable files) with many ties, run through what the manager runs when a
session ends: every kernel's record built, then the strategy applied.

    .venv/bin/python bench/root_cause.py [--sizes 1000 10000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from corral.domain.cause import KernelOutcome
from corral.domain.error_record import CORRAL_SCHEMA, FileRecord, parse_file
from corral.domain.final import final_verdict
from corral.domain.spec import ErrorStrategy
from corral.domain.status import KernelStatus

GLOO = "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.7]:4242"
T = 1_795_471_091


def stored(raw: object) -> dict[str, object]:
    parsed = parse_file(raw)
    return parsed.to_json() if isinstance(parsed, FileRecord) else {"note": parsed}


def workers(n: int, rnd: random.Random) -> list[KernelOutcome]:
    out = []
    for rank in range(n):
        second = T + rnd.randint(0, 2)  # few distinct seconds: many ties
        message = "ValueError: bad batch" if rank == n // 3 else GLOO
        form = rank % 4
        raw: object = None
        if form == 0:
            raw = {
                "message": {
                    "message": message,
                    "extraInfo": {"py_callstack": "tb" * 50, "timestamp": str(second)},
                }
            }
        elif form == 1:
            raw = {
                "schema": CORRAL_SCHEMA,
                "message": message,
                "type": "RuntimeError",
                "timestamp_ns": second * 10**9,
            }
        elif form == 3:
            raw = {"unknown": "format"}
        out.append(
            KernelOutcome(
                rank=rank,
                status=KernelStatus.ERROR,
                exit_code=1,
                started=True,
                exited_at_ns=second * 10**9 + rnd.randint(0, 10**6) // 1000 * 1000,
                kernel_id=f"kernel-{rank}",
                agent_id=f"agent-{rank % 64}",
                worker=f"rank-{rank}",
                error_file=stored(raw) if raw is not None else None,
                log_tail=f"[rank{rank}]: Traceback (most recent call last):\n[rank{rank}]: {message}",
                killed_by_corral=rank % 7 == 0,
                signal=15 if rank % 7 == 0 else None,
            )
        )
    rnd.shuffle(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    rnd = random.Random(7)
    print(f"cores: {os.cpu_count()}")
    for n in args.sizes:
        kernels = workers(n, rnd)
        for strategy in ErrorStrategy:
            times = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                verdict = final_verdict(kernels, None, strategy)
                times.append(time.perf_counter() - start)
            rank = verdict.root_rank
            print(
                f"{n:>6} records  {strategy:<16}  median {statistics.median(times) * 1000:7.2f} ms"
                f"  max {max(times) * 1000:7.2f} ms per session  (root cause rank {rank})"
            )


if __name__ == "__main__":
    main()
