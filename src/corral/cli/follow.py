"""Following a session: its output to stdout/stderr, its status on stderr, then its exit code."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from corral.client import Client
    from corral.client.models import Session


def exit_code_of(session: Session) -> int:
    """0 on success, 137 for an OOM kill, the root-cause kernel's code, else 1."""
    if session.succeeded:
        return 0
    if session.cause == "oom_killed":
        return 137
    code = session.exit_code
    return code if isinstance(code, int) and code != 0 else 1


class Printer:
    """Writes chunks; with a prefix, only whole lines, each marked with its rank."""

    def __init__(self, prefix: bool) -> None:
        self.prefix = prefix
        self.partial: dict[tuple[int, str], str] = {}

    def write(self, rank: int, stream: str, data: str) -> None:
        out: TextIO = sys.stdout if stream == "stdout" else sys.stderr
        if not self.prefix:
            out.write(data)
            out.flush()
            return
        text = self.partial.pop((rank, stream), "") + data
        *lines, rest = text.split("\n")
        for line in lines:
            out.write(f"[{rank}] {line}\n")
        if rest:
            self.partial[(rank, stream)] = rest
        out.flush()

    def close(self) -> None:
        for (rank, stream), rest in self.partial.items():
            (sys.stdout if stream == "stdout" else sys.stderr).write(f"[{rank}] {rest}\n")


def follow(api: Client, session_id: str, prefix: bool | None, quiet: bool = False) -> Session:
    """Stream logs and status until the session ends and every log chunk has been printed."""
    cursor = 0
    last_status = ""
    printer: Printer | None = None
    delay = 0.05
    while True:
        session = api.sessions.get(session_id)
        if printer is None:
            multi = session.cluster_size > 1
            printer = Printer(bool(prefix) if prefix is not None else multi and sys.stdout.isatty())
        if session.status != last_status and not session.ended and not quiet:
            last_status = session.status
            agents = sorted({k.agent for k in session.kernels if k.agent})
            where = (
                f" on {', '.join(agents)}"
                if agents and last_status in ("SCHEDULED", "PREPARING", "RUNNING")
                else ""
            )
            print(f"corral: session {session_id[:8]} {last_status}{where}", file=sys.stderr, flush=True)
        logs = api.sessions.logs(session_id, after=cursor)
        for chunk in logs.chunks:
            printer.write(chunk.rank, chunk.stream, chunk.data)
        cursor = logs.next
        if logs.complete:
            printer.close()
            final = api.sessions.get(session_id)
            if not quiet:
                tail = f" cause={final.cause}" if final.cause else ""
                code = f" exit_code={final.exit_code}" if final.exit_code is not None else ""
                print(f"corral: session {session_id[:8]} {final.status}{tail}{code}", file=sys.stderr)
                if final.root_cause:
                    print(f"corral: root cause: {final.root_cause.line()}", file=sys.stderr)
            return final
        if logs.chunks:
            delay = 0.05
            continue
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


DECISION_WAIT = 60.0


class Chain:
    """Follows a session and then each retry of it, until the chain's last attempt has ended."""

    def __init__(self, api: Client, session_id: str, prefix: bool | None, quiet: bool) -> None:
        self.api = api
        self.current = session_id
        self.prefix = prefix
        self.quiet = quiet

    def follow(self) -> Session:
        while True:
            final = follow(self.api, self.current, self.prefix, self.quiet)
            decided = self._decision(final)
            child_id = decided.next_attempt_id
            if not child_id:
                if decided.retry_state == "exhausted" and not self.quiet:
                    print(f"corral: no more retries: {decided.retry_reason}", file=sys.stderr)
                return final
            child = self.api.sessions.get(child_id)
            if not self.quiet:
                print(f"corral: {_retry_line(final, child)}", file=sys.stderr, flush=True)
            self.current = child_id

    def _decision(self, final: Session) -> Session:
        """The ended attempt once the retry engine has decided on it (it does within a cycle)."""
        start = time.monotonic()
        said = False
        session = final
        while session.retry_reason is None and time.monotonic() - start < DECISION_WAIT:
            time.sleep(0.05)
            session = self.api.sessions.get(self.current)
            if not said and not self.quiet and time.monotonic() - start > 2:
                print("corral: waiting for the retry decision", file=sys.stderr, flush=True)
                said = True
        if session.retry_reason is None and not self.quiet:
            print(
                f"corral: no retry decision after {DECISION_WAIT:.0f} s; a retry may still come:"
                f" corral session attempts {self.current}",
                file=sys.stderr,
            )
        return session


def _retry_line(parent: Session, child: Session) -> str:
    """ "attempt 2 of 4 after kernel_nonzero_exit (exit 75), retrying in 1.0 s"."""
    why = parent.cause or "unknown"
    if parent.exit_code is not None:
        why += f" (exit {parent.exit_code})"
    delay = max(0.0, (child.retry_after - child.created_at).total_seconds()) if child.retry_after else 0.0
    when = f"retrying in {delay:.1f} s" if delay else "retrying now"
    return f"attempt {child.attempt} of {child.max_attempts} after {why}, {when}"
