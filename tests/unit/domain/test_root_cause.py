"""Error records and root-cause aggregation (DESIGN §4): parsing both formats, synthesis, strategies,
and that the answer is a pure function of the records, never of their order."""

from __future__ import annotations

import json
import os
import random
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.domain.cause import Cause, KernelOutcome, TerminationReason
from corral.domain.error_record import (
    CORRAL_SCHEMA,
    MESSAGE_MAX,
    SECOND_NS,
    FileRecord,
    Source,
    error_record,
    exception_in,
    parse_file,
)
from corral.domain.final import failure_records, final_verdict
from corral.domain.root_cause import aggregate, default_strategy, is_side_effect
from corral.domain.spec import ErrorStrategy
from corral.domain.status import KernelStatus as K

WORKERLIB = Path(__file__).resolve().parents[3] / "src" / "corral" / "workerlib"
GLOO = (
    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by "
    "peer [127.0.0.1]:60845. This is typically caused by a remote worker crashing."
)
T = 1_795_471_091  # a whole second, as torch writes it


def torch_file(message: str, seconds: int) -> dict[str, Any]:
    return {
        "message": {
            "message": message,
            "extraInfo": {"py_callstack": "Traceback...", "timestamp": str(seconds)},
        }
    }


def corral_file(
    message: str, ns: int, type_: str = "ValueError", recoverable: bool = False
) -> dict[str, Any]:
    return {
        "schema": CORRAL_SCHEMA,
        "worker": {"name": "w", "rank": 0},
        "timestamp_ns": ns,
        "kind": "exception",
        "type": type_,
        "message": message,
        "traceback": "tb",
        "recoverable": recoverable,
    }


def stored(raw: object) -> dict[str, Any]:
    """What the agent ships for a file: normalised, or a note."""
    parsed = parse_file(raw)
    return parsed.to_json() if isinstance(parsed, FileRecord) else {"note": parsed}


def kernel(rank: int, exited: int | None, file: object = None, **kw: Any) -> KernelOutcome:
    fields: dict[str, Any] = {"exit_code": 1, "started": True, "status": K.ERROR}
    fields.update(kw)
    return KernelOutcome(
        rank=rank,
        exited_at_ns=exited,
        kernel_id=f"k{rank}",
        agent_id="local-1",
        worker=f"rank-{rank}",
        error_file=stored(file) if file is not None else None,
        **fields,
    )


def root_rank(kernels: list[KernelOutcome], strategy: ErrorStrategy) -> int | None:
    found = aggregate(failure_records(kernels), strategy)
    return found.record.rank if found else None


# --- parsing ---------------------------------------------------------------------------------------
def test_torch_record_whole_seconds_and_split_type() -> None:
    r = parse_file(torch_file("ValueError: bad batch\nmore", T))
    assert isinstance(r, FileRecord)
    assert (r.source, r.type, r.message) == (Source.TORCH, "ValueError", "bad batch\nmore")
    assert (r.timestamp_ns, r.resolution_ns, r.recoverable) == (T * SECOND_NS, SECOND_NS, None)


def test_corral_record_nanoseconds_and_recoverable() -> None:
    r = parse_file(corral_file("x", 123, recoverable=True))
    assert isinstance(r, FileRecord)
    assert (r.source, r.timestamp_ns, r.resolution_ns, r.recoverable) == (Source.CORRAL, 123, 1, True)


@pytest.mark.parametrize(
    "raw",
    [
        [],
        "text",
        42,
        {},
        {"schema": CORRAL_SCHEMA},
        {"schema": CORRAL_SCHEMA, "message": 5},
        {"message": {"extraInfo": {}}},
        {"message": ["x"]},
        {"unrelated": True},
    ],
)
def test_unusable_records_give_a_note(raw: object) -> None:
    assert isinstance(parse_file(raw), str)


def test_wrong_field_types_are_dropped_not_fatal() -> None:
    raw = {**corral_file("m", 1), "timestamp_ns": "soon", "recoverable": "yes", "type": 7, "worker": [1]}
    r = parse_file(raw)
    assert isinstance(r, FileRecord)
    assert (r.timestamp_ns, r.recoverable, r.type, r.worker) == (None, None, "", None)


def test_huge_fields_are_capped() -> None:
    r = parse_file(corral_file("m" * (MESSAGE_MAX * 10), 1))
    assert isinstance(r, FileRecord) and len(r.message) == MESSAGE_MAX


def test_an_unusable_file_yields_a_synthesized_record_with_its_note() -> None:
    r = error_record(kernel(0, 5, file={"unrelated": 1}, log_tail="ValueError: from the log"))
    assert (r.source, r.type, r.message, r.timestamp_ns) == (
        Source.SYNTHESIZED,
        "ValueError",
        "from the log",
        5,
    )
    assert r.note and "no known format" in r.note


# --- synthesis -------------------------------------------------------------------------------------
def test_synthesized_from_a_torch_prefixed_log_tail() -> None:
    tail = "[rank1]: Traceback (most recent call last):\n[rank1]:   File x\n[rank1]: ValueError: bad batch"
    r = error_record(kernel(1, 77, log_tail=tail))
    assert (r.type, r.message, r.timestamp_ns, r.resolution_ns) == ("ValueError", "bad batch", 77, 1)


def test_exception_line_takes_the_last_one() -> None:
    assert exception_in("KeyError: a\nINFO: fine\nfoo.BarError: b") == ("foo.BarError", "b")
    assert exception_in("INFO: nothing to see") is None


@pytest.mark.parametrize(
    ("kw", "kind"),
    [
        ({"oom_killed": True, "exit_code": 137, "signal": 9}, "oom"),
        ({"agent_lost": True, "exit_code": None}, "lost"),
        ({"exit_code": 3}, "exit"),
        ({"exit_code": 143, "signal": 15, "killed_by_corral": True}, "signal"),
    ],
)
def test_synthesized_kinds(kw: dict[str, Any], kind: str) -> None:
    assert error_record(kernel(0, 1, **kw)).kind == kind


# --- strategies ------------------------------------------------------------------------------------
def test_strategies_differ_where_they_should() -> None:
    # rank 1 raises first; rank 0 (main) sees the peer gone a moment later; rank 2 later still.
    kernels = [
        kernel(0, 200, torch_file(GLOO, T)),
        kernel(1, 100, torch_file("ValueError: bad batch", T)),
        kernel(2, 300, torch_file(GLOO, T)),
    ]
    assert root_rank(kernels, ErrorStrategy.SINGLE) == 0
    assert root_rank(kernels, ErrorStrategy.EARLIEST) == 1
    assert root_rank(kernels, ErrorStrategy.EARLIEST_PRIMARY) == 1
    # A side effect stamped earlier (another clock, a collective timeout noticed first): only the
    # primary strategy still blames the worker that really failed.
    skewed = [kernel(0, 50, corral_file(GLOO, 10)), kernel(1, 100, corral_file("bad batch", 20))]
    assert root_rank(skewed, ErrorStrategy.EARLIEST) == 0
    assert root_rank(skewed, ErrorStrategy.EARLIEST_PRIMARY) == 1


def test_earliest_primary_falls_back_to_earliest_when_all_are_side_effects() -> None:
    kernels = [kernel(0, 200, corral_file(GLOO, 2)), kernel(1, 100, corral_file(GLOO, 1))]
    assert root_rank(kernels, ErrorStrategy.EARLIEST_PRIMARY) == 1


def test_single_falls_back_when_corral_stopped_the_main_kernel() -> None:
    kernels = [
        kernel(0, 300, exit_code=143, signal=15, killed_by_corral=True),
        kernel(2, 200, log_tail="ValueError: x"),
        kernel(1, 250, log_tail="ValueError: y"),
    ]
    assert root_rank(kernels, ErrorStrategy.SINGLE) == 2


def test_same_second_ties_go_to_exit_time_then_rank() -> None:
    kernels = [kernel(2, 100, torch_file("A: a", T)), kernel(1, 300, torch_file("A: b", T))]
    assert root_rank(kernels, ErrorStrategy.EARLIEST) == 2
    same_exit = [kernel(2, 100, torch_file("A: a", T)), kernel(1, 100, torch_file("A: b", T))]
    assert root_rank(same_exit, ErrorStrategy.EARLIEST) == 1


def test_coarsest_resolution_governs_a_mixed_set() -> None:
    # A torch record (second T) and a Corral one 0.9 s later in the same second: they tie on the
    # second, so the earlier exit wins, whatever the nanoseconds say.
    kernels = [
        kernel(0, 900, corral_file("B: b", T * SECOND_NS + 900_000_000)),
        kernel(1, 950, torch_file("A: a", T)),
    ]
    assert root_rank(kernels, ErrorStrategy.EARLIEST) == 0


def test_corral_stopped_everything_means_no_root_cause() -> None:
    kernels = [kernel(r, 100, exit_code=143, signal=15, killed_by_corral=True) for r in range(3)]
    assert root_rank(kernels, ErrorStrategy.EARLIEST) is None
    assert final_verdict(kernels, None).root_cause is None


def test_the_verdict_takes_cause_and_exit_code_from_the_root_cause() -> None:
    kernels = [kernel(0, 50, torch_file(GLOO, T), exit_code=1), kernel(1, 60, exit_code=137, oom_killed=True)]
    v = final_verdict(kernels, None, ErrorStrategy.EARLIEST_PRIMARY)
    assert (v.root_rank, v.cause, v.exit_code) == (1, Cause.OOM_KILLED, 137)


def test_a_record_written_by_a_kernel_corral_stopped_is_a_side_effect() -> None:
    # Rank 0 lost its peer; rank 1, stopped by Corral, then wrote torch's SignalException.
    kernels = [
        kernel(0, 100, torch_file(GLOO, T)),
        kernel(1, 200, torch_file("SignalException: Process 42 got signal: 15", T), killed_by_corral=True),
    ]
    v = final_verdict(kernels, None, ErrorStrategy.EARLIEST_PRIMARY)
    assert (v.root_rank, v.cause, v.exit_code) == (0, Cause.KERNEL_NONZERO_EXIT, 1)
    # A worker that wrote its error and then lingered until Corral stopped it is still the fallback.
    alone = [kernel(1, 200, corral_file("bad batch", 5), killed_by_corral=True, exit_code=143, signal=15)]
    assert final_verdict(alone, None).root_rank == 1


def test_a_stop_for_a_reason_is_the_cause_even_through_a_fence() -> None:
    lost = kernel(0, None, agent_lost=True, exit_code=None)
    stopped = kernel(1, 50, exit_code=143, signal=15, killed_by_corral=True)
    v = final_verdict([lost, stopped], TerminationReason.DEADLINE_EXCEEDED)
    assert (v.cause, v.root_rank) == (Cause.DEADLINE_EXCEEDED, None)
    # Without a reason, the lost node is the root cause.
    assert final_verdict([lost, kernel(1, 50, log_tail=GLOO)], None).cause is Cause.AGENT_TRANSIENT


def test_a_node_declared_gone_is_stamped_and_comes_first() -> None:
    # Declared gone: stamped with its agent's last heartbeat, before its peer lost the connection.
    lost = kernel(0, 40, agent_lost=True, exit_code=None)
    peer = kernel(1, 50, log_tail=GLOO)
    assert root_rank([lost, peer], ErrorStrategy.EARLIEST) == 0


def test_side_effects() -> None:
    base = error_record(kernel(0, 1, log_tail=""))
    for message in (
        GLOO,
        "Connection reset by peer",
        "NCCL communicator was aborted",
        "Watchdog caught collective operation timeout",
    ):
        assert is_side_effect(replace(base, message=message)), message
    assert not is_side_effect(replace(base, type="ValueError", message="bad batch"))
    assert is_side_effect(replace(base, type="ConnectionResetError", message="x"))


def test_default_strategy_by_cluster_size() -> None:
    assert default_strategy(1) is ErrorStrategy.SINGLE
    assert default_strategy(3) is ErrorStrategy.EARLIEST_PRIMARY


# --- order independence ----------------------------------------------------------------------------
messages = st.sampled_from(
    ["ValueError: bad", GLOO, "Connection reset by peer", "KeyError: k", "RuntimeError: x"]
)


@st.composite
def kernel_sets(draw: st.DrawFn) -> list[KernelOutcome]:
    n = draw(st.integers(1, 12))
    out = []
    for rank in range(n):
        exited = draw(st.one_of(st.none(), st.integers(0, 5)))
        form = draw(st.sampled_from(["torch", "corral", "none", "bad"]))
        message = draw(messages)
        file: object = {
            "torch": torch_file(message, T + draw(st.integers(0, 1))),
            "corral": corral_file(message, T * SECOND_NS + draw(st.integers(0, 3))),
            "none": None,
            "bad": {"nope": 1},
        }[form]
        killed = draw(st.booleans()) and draw(st.booleans())
        out.append(kernel(rank, exited, file, killed_by_corral=killed, log_tail=message))
    return out


@settings(max_examples=300, deadline=None)
@given(kernel_sets(), st.sampled_from(list(ErrorStrategy)), st.randoms(use_true_random=False))
def test_aggregation_ignores_arrival_order(
    kernels: list[KernelOutcome], strategy: ErrorStrategy, rnd: random.Random
) -> None:
    records = failure_records(kernels)
    first = aggregate(records, strategy)
    for _ in range(20):
        shuffled = records[:]
        rnd.shuffle(shuffled)
        again = aggregate(shuffled, strategy)
        assert (again.record if again else None) == (first.record if first else None)


# --- the worker helper -----------------------------------------------------------------------------
def helper(tmp_path: Path, code: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    """Runs `code` in the machine's own python3, isolated from this venv, with only the helper's dir."""
    error_file = tmp_path / "error.json"
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(WORKERLIB),
        "CORRAL_ERROR_FILE": str(error_file),
        "CORRAL_WORKER_NAME": "rank-2",
        "CORRAL_CLUSTER_RANK": "2",
    }
    done = subprocess.run(
        ["/usr/bin/env", "python3", "-c", code], env=env, capture_output=True, text=True, timeout=30
    )
    return done, json.loads(error_file.read_text()) if error_file.exists() else None


def test_record_decorator_writes_a_corral_record_and_reraises(tmp_path: Path) -> None:
    code = "from corral_worker import record\n@record\ndef main():\n    raise ValueError('bad batch')\nmain()"
    done, written = helper(tmp_path, code)
    assert done.returncode == 1 and "ValueError: bad batch" in done.stderr
    assert written is not None
    r = parse_file(written)
    assert isinstance(r, FileRecord)
    assert (r.source, r.type, r.message, r.recoverable, r.worker) == (
        Source.CORRAL,
        "ValueError",
        "bad batch",
        False,
        "rank-2",
    )
    assert written["worker"]["rank"] == 2 and written["timestamp_ns"] > T * SECOND_NS
    assert "line 4, in main" in written["traceback"]


def test_recoverable_error_in_a_with_block(tmp_path: Path) -> None:
    code = "from corral_worker import *\nwith record():\n    raise RecoverableError('flaky disk')"
    done, written = helper(tmp_path, code)
    assert done.returncode == 1 and written is not None
    assert (written["type"], written["recoverable"]) == ("corral_worker.RecoverableError", True)


def test_a_huge_or_wide_message_still_fits_the_agents_cap(tmp_path: Path) -> None:
    code = "from corral_worker import *\nwith record():\n    raise ValueError('\u6f22' * 70000)"
    done, written = helper(tmp_path, code)
    assert done.returncode == 1 and written is not None
    assert (tmp_path / "error.json").stat().st_size <= 64 * 1024
    r = parse_file(written)
    assert isinstance(r, FileRecord) and r.message == "\u6f22" * MESSAGE_MAX


def test_an_unprintable_exception_is_still_the_one_raised(tmp_path: Path) -> None:
    code = (
        "from corral_worker import *\n"
        "class Odd(Exception):\n    def __str__(self): raise RuntimeError('no str')\n"
        "try:\n    with record():\n        raise Odd()\n"
        "except Odd:\n    print('the user exception')\n"
    )
    done, written = helper(tmp_path, code)
    assert done.stdout.strip() == "the user exception", done.stderr
    assert written is not None and "could not be read" in written["message"]


def test_success_and_clean_exit_write_nothing(tmp_path: Path) -> None:
    done, written = helper(
        tmp_path, "from corral_worker import record\nwith record():\n    raise SystemExit(0)"
    )
    assert done.returncode == 0 and written is None
