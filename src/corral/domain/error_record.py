"""Per-worker error records (DESIGN §4): a worker's own file in either format, else one synthesized
from what the agent saw.  Nothing a kernel writes can make these functions raise."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from corral.domain.cause import KernelOutcome

CORRAL_SCHEMA = "corral.error/v1"
FILE_MAX = 64 * 1024
"""Error files over this many bytes are not parsed (a synthesized record says so)."""
MESSAGE_MAX = 4096
TRACEBACK_MAX = 16 * 1024
NAME_MAX = 256
SECOND_NS = 1_000_000_000

# "ValueError: bad batch", "torch.distributed.DistNetworkError: ...", torch's "[rank1]: " prefix.
_EXCEPTION_LINE = re.compile(
    r"^(?:\[(?:rank|default)\d+\]:\s*)?"
    r"((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure|Timeout)):\s?(.*)$"
)
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:\s?")


def worker_name(rank: int) -> str:
    """$CORRAL_WORKER_NAME of a kernel: its rank is what a user of a gang looks for."""
    return f"rank-{rank}"


class Source(StrEnum):
    CORRAL = "corral"
    TORCH = "torch"
    SYNTHESIZED = "synthesized"


@dataclass(frozen=True)
class FileRecord:
    """What a worker wrote to its error file, normalised (both formats)."""

    source: Source
    """Which format it was written in."""
    kind: str
    """exception, signal or exit."""
    type: str
    """Exception type, e.g. ValueError."""
    message: str
    """The error message (at most MESSAGE_MAX characters)."""
    traceback: str
    """Traceback text (its last TRACEBACK_MAX characters)."""
    timestamp_ns: int | None
    """When the error happened, by the worker's clock."""
    resolution_ns: int
    """How precise timestamp_ns is: 1 for Corral's records, one second for torch's."""
    recoverable: bool | None
    """Corral records only: the worker said whether a retry can help."""
    worker: str | None = None
    """Worker name the record gives, if any."""

    def to_json(self) -> dict[str, Any]:
        return {
            "source": str(self.source),
            "kind": self.kind,
            "type": self.type,
            "message": self.message,
            "traceback": self.traceback,
            "timestamp_ns": self.timestamp_ns,
            "resolution_ns": self.resolution_ns,
            "recoverable": self.recoverable,
            "worker": self.worker,
        }


@dataclass(frozen=True)
class ErrorRecord:
    """One failed worker's error: from its file, or synthesized from its exit."""

    worker: str
    """Worker name ($CORRAL_WORKER_NAME)."""
    rank: int
    """Cluster rank."""
    kernel_id: str
    """Its kernel."""
    agent: str | None
    """The agent it ran on."""
    source: Source
    """Its file's format, or synthesized."""
    kind: str
    """exception, signal, exit, oom or lost."""
    type: str
    """Exception type, or a word for how it ended (exit, signal, oom_killed, agent_lost)."""
    message: str
    """The error message."""
    traceback: str
    """Traceback text, or the log tail of a synthesized record."""
    timestamp_ns: int | None
    """When it failed: the record's time, else the agent-observed exit time."""
    resolution_ns: int
    """Precision of timestamp_ns."""
    exited_at_ns: int | None
    """The agent-observed exit time (the tie-breaker)."""
    recoverable: bool | None
    """True or False only when the worker said so."""
    exit_code: int | None
    """The kernel's exit code."""
    signal: int | None
    """The signal that ended it."""
    killed_by_corral: bool
    """Corral stopped it: always a side effect, never a root cause."""
    note: str | None = None
    """Why the file was not used, when it was not."""


def _text(value: object, limit: int, tail: bool = False) -> str | None:
    if not isinstance(value, str):
        return None
    return value[-limit:] if tail else value[:limit]


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if (
        isinstance(value, str)
        and value.strip().isascii()
        and value.strip().isdigit()
        and len(value.strip()) < 20
    ):
        return int(value.strip())
    return None


def _split_exception(text: str) -> tuple[str, str]:
    """'ValueError: bad batch' -> ('ValueError', 'bad batch'); other text -> ('', text)."""
    first, _, rest = text.partition("\n")
    m = _EXCEPTION_LINE.match(first.strip())
    if m:
        return m.group(1), m.group(2) + ("\n" + rest if rest else "")
    return "", text


def _corral(raw: Mapping[str, Any]) -> FileRecord | str:
    message = _text(raw.get("message"), MESSAGE_MAX)
    if message is None:
        return "corral.error/v1 record without a string 'message'"
    worker = raw.get("worker")
    stamp = _int(raw.get("timestamp_ns"))
    recoverable = raw.get("recoverable")
    return FileRecord(
        source=Source.CORRAL,
        kind=_text(raw.get("kind"), 16) or "exception",
        type=_text(raw.get("type"), NAME_MAX) or "",
        message=message,
        traceback=_text(raw.get("traceback"), TRACEBACK_MAX, tail=True) or "",
        timestamp_ns=stamp if stamp is not None and stamp >= 0 else None,
        resolution_ns=1,
        recoverable=recoverable if isinstance(recoverable, bool) else None,
        worker=_text(worker.get("name"), NAME_MAX) if isinstance(worker, Mapping) else None,
    )


def _torch(raw: Mapping[str, Any]) -> FileRecord | str:
    body = raw.get("message")
    if isinstance(body, str):  # torch writes a plain string when it had no exception to format
        body = {"message": body}
    if not isinstance(body, Mapping) or not isinstance(body.get("message"), str):
        return "torch elastic record without a string message.message"
    extra = body.get("extraInfo")
    extra = extra if isinstance(extra, Mapping) else {}
    seconds = _int(extra.get("timestamp"))
    kind, text = _split_exception(body["message"])
    return FileRecord(
        source=Source.TORCH,
        kind="exception",
        type=kind,
        message=text[:MESSAGE_MAX],
        traceback=_text(extra.get("py_callstack"), TRACEBACK_MAX, tail=True) or "",
        timestamp_ns=seconds * SECOND_NS if seconds is not None else None,
        resolution_ns=SECOND_NS,
        recoverable=None,
    )


def parse_file(raw: object) -> FileRecord | str:
    """A worker's error file (already JSON-decoded), normalised; a string says why it is unusable."""
    if not isinstance(raw, Mapping):
        return "the error file is not a JSON object"
    if raw.get("schema") == CORRAL_SCHEMA:
        return _corral(raw)
    if "message" in raw:
        return _torch(raw)
    return "the error file is in no known format (corral.error/v1 or torch elastic)"


def file_record_of(stored: Mapping[str, Any] | None) -> FileRecord | str | None:
    """A stored normalised record back (None: no file; a string: the note on an unusable one)."""
    if stored is None:
        return None
    if "note" in stored and "source" not in stored:
        note = stored.get("note")
        return note if isinstance(note, str) else "unusable error file"
    try:
        return FileRecord(
            source=Source(stored["source"]),
            kind=str(stored["kind"]),
            type=str(stored["type"]),
            message=str(stored["message"]),
            traceback=str(stored["traceback"]),
            timestamp_ns=_int(stored.get("timestamp_ns")),
            resolution_ns=_int(stored.get("resolution_ns")) or 1,
            recoverable=stored.get("recoverable") if isinstance(stored.get("recoverable"), bool) else None,
            worker=_text(stored.get("worker"), NAME_MAX),
        )
    except (KeyError, ValueError):
        return "unusable error file"


def exception_in(log_tail: str) -> tuple[str, str] | None:
    """The last Python exception line of a log tail, e.g. ('ValueError', 'bad batch')."""
    for line in reversed(log_tail.splitlines()):
        m = _EXCEPTION_LINE.match(line.strip())
        if m:
            return m.group(1), m.group(2)[:MESSAGE_MAX]
    return None


def strip_rank_prefix(text: str) -> str:
    return "\n".join(_RANK_PREFIX.sub("", line) for line in text.splitlines())


def _synthesized(k: KernelOutcome) -> tuple[str, str, str]:
    """kind, type and message from how the kernel ended and its log tail."""
    if k.agent_lost and not k.started:
        return "lost", "agent_lost", "its agent was lost before it started"
    if k.agent_lost:
        return "lost", "agent_lost", "its agent was lost (fenced) while it ran"
    if k.image_failed:
        # The agent's words (an unknown image, pip's last lines) say what to fix.
        said = k.termination_log.strip()[-MESSAGE_MAX:]
        return "exit", "image_pull_failure", said or "its runtime environment could not be prepared"
    if k.oom_killed:
        return "oom", "oom_killed", "killed for memory (cgroup oom_kill counter or watchdog)"
    found = exception_in(strip_rank_prefix(k.log_tail))
    if found and not (k.killed_by_corral and k.signal is not None):
        return "exception", found[0], found[1]
    if k.signal is not None:
        who = "by Corral" if k.killed_by_corral else ""
        return "signal", "signal", f"killed {who} by signal {k.signal}".replace("  ", " ")
    if k.exit_code is not None:
        words = _last_line(k.termination_log) or _last_line(strip_rank_prefix(k.log_tail))
        return "exit", "exit", f"exited with code {k.exit_code}" + (f": {words}" if words else "")
    return "exit", "unknown", "ended without an exit code"


WORDS_MAX = 300


def _last_line(text: str) -> str:
    """The failure's own words for a message: the last line that says something, cut short."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:WORDS_MAX] if lines else ""


def error_record(k: KernelOutcome) -> ErrorRecord:
    """The kernel's record: its file's, else synthesized and stamped with the agent-observed exit."""
    found = file_record_of(k.error_file)
    # Stopped by Corral only when nothing of its own (agent lost, environment, memory) ended it.
    stopped = k.killed_by_corral and not (k.agent_lost or k.image_failed or k.oom_killed)
    note = found if isinstance(found, str) else None
    if isinstance(found, FileRecord):
        return ErrorRecord(
            worker=k.worker or found.worker or worker_name(k.rank),
            rank=k.rank,
            kernel_id=k.kernel_id,
            agent=k.agent_id,
            source=found.source,
            kind=found.kind,
            type=found.type,
            message=found.message,
            traceback=found.traceback,
            timestamp_ns=found.timestamp_ns if found.timestamp_ns is not None else k.exited_at_ns,
            resolution_ns=found.resolution_ns if found.timestamp_ns is not None else 1,
            exited_at_ns=k.exited_at_ns,
            recoverable=found.recoverable,
            exit_code=k.exit_code,
            signal=k.signal,
            killed_by_corral=stopped,
        )
    kind, type_, message = _synthesized(k)
    return ErrorRecord(
        worker=k.worker or worker_name(k.rank),
        rank=k.rank,
        kernel_id=k.kernel_id,
        agent=k.agent_id,
        source=Source.SYNTHESIZED,
        kind=kind,
        type=type_,
        message=message,
        traceback=k.log_tail[-TRACEBACK_MAX:],
        timestamp_ns=k.exited_at_ns,
        resolution_ns=1,
        exited_at_ns=k.exited_at_ns,
        recoverable=None,
        exit_code=k.exit_code,
        signal=k.signal,
        killed_by_corral=stopped,
        note=note,
    )
