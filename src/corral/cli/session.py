"""`corral session list|info|logs|history|attempts|retry|cancel`."""

import contextlib
import time
from typing import TYPE_CHECKING, Annotated

import typer

from corral.cli.connect import connect, fail
from corral.cli.follow import Printer, follow
from corral.cli.output import Format, OutputOpt, console, emit, table_of

if TYPE_CHECKING:
    from rich.text import Text

app = typer.Typer(rich_markup_mode=None, help="Inspect and control sessions.", no_args_is_help=True)

SESSION_COLUMNS = [
    ("ID", "id"),
    ("NAME", "name"),
    ("STATUS", "status"),
    ("RESULT", "result"),
    ("CAUSE", "cause"),
    ("EXIT", "exit_code"),
    ("PRIO", "priority"),
    ("SIZE", "cluster_size"),
    ("CREATED", "created_at"),
]
SessionId = Annotated[str, typer.Argument(help="session id (or its first 8 or more characters)")]


@app.command("list")
def list_sessions(
    status: Annotated[list[str] | None, typer.Option(help="only these statuses")] = None,
    limit: Annotated[int, typer.Option(help="at most this many")] = 50,
    array: Annotated[str | None, typer.Option(help="only this job array's elements, by index")] = None,
    watch: Annotated[
        float | None,
        typer.Option(
            "--watch", "-w", help="refresh in place every this many seconds (as `watch squeue`; Ctrl-C stops)"
        ),
    ] = None,
    output: Format = OutputOpt,
) -> None:
    """List sessions, newest first (an array's elements by index); statuses in any case."""
    statuses = [x.upper() for x in status or []]
    if watch is not None and not 0.2 <= watch <= 3600:
        raise fail("--watch: give 0.2 to 3600 seconds")
    api = connect()
    if watch is None:
        emit(api.raw.sessions.list(statuses, limit, array=array), output, SESSION_COLUMNS)
        return
    from rich.live import Live
    from rich.text import Text

    def screen() -> "Text":
        rows = api.raw.sessions.list(statuses, limit, array=array)
        return Text(table_of(rows, SESSION_COLUMNS, title=f"every {watch:g} s, {time.strftime('%H:%M:%S')}"))

    with (
        contextlib.suppress(KeyboardInterrupt),
        Live(screen(), console=console(), auto_refresh=False) as live,
    ):
        while True:
            time.sleep(watch)
            live.update(screen(), refresh=True)


@app.command()
def info(session_id: SessionId, output: Format = OutputOpt) -> None:
    """Show one session with its kernels."""
    api = connect()
    s = api.sessions.get(session_id)
    if output is not Format.table:
        emit(s, output)
        return
    attempt = f"attempt {s.attempt} of {s.max_attempts}"
    emit(s, output, SESSION_COLUMNS, title=f"session {s.name} ({attempt})")
    typer.echo(f"{attempt}; retry state: {s.retry_state}")
    if s.parent_session_id:
        typer.echo(f"previous attempt: {s.parent_session_id} (this one after {s.retry_cause or '-'})")
    if s.next_attempt_id:
        typer.echo(f"next attempt: {s.next_attempt_id}")
    if s.retry_reason:
        typer.echo(f"retry decision: {s.retry_reason}")
    if s.retry_after and s.status == "PENDING":
        typer.echo(f"not before: {s.dump()['retry_after']}")
    if s.resume_count or s.status == "SUSPENDED":
        for h in api.sessions.history(s.id):
            if h.to_status == "SUSPENDED" or h.result == "RESUMED":
                what = "suspended" if h.to_status == "SUSPENDED" else "resumed"
                typer.echo(f"{what} at {h.created_at:%Y-%m-%d %H:%M:%S}: {h.message}")
    kernels = [{**k.dump(), "exit": k.exit_code, "oom": k.oom_killed} for k in s.kernels]
    emit(
        kernels,
        output,
        [
            ("RANK", "rank"),
            ("ROLE", "role"),
            ("AGENT", "agent"),
            ("STATUS", "status"),
            ("EXIT", "exit"),
            ("SIGNAL", "signal"),
            ("OOM", "oom"),
            ("KERNEL", "id"),
        ],
    )
    if w := s.waiting:
        free = ", ".join(f"{k} {v}" for k, v in (w.largest_free or {}).items()) or "no live agent"
        typer.echo(f"queue: position {w.position}; {w.reason}; the largest free on one agent: {free}")
    if s.waiting_reason:
        typer.echo(f"waiting: {s.waiting_reason}")
    if s.preempted_by:
        typer.echo(f"preempted by: {s.preempted_by}")
    if s.victims:
        typer.echo(f"preempted to make room: {', '.join(s.victims)}")
    if rc := s.root_cause:
        typer.echo(f"root cause: {rc.line()}")
        recoverable = {True: "yes", False: "no", None: "not said"}[rc.recoverable]
        at = rc.dump()["timestamp"] or "-"
        typer.echo(
            f"  exit {rc.exit_code}, at {at} (resolution {rc.resolution}), "
            f"recoverable: {recoverable}, strategy {rc.strategy}; all records: corral session errors ID"
        )


@app.command()
def logs(
    session_id: SessionId,
    follow_: Annotated[
        bool, typer.Option("--follow", "-f", help="print output live, until the session ends")
    ] = False,
    kernel: Annotated[int | None, typer.Option("--kernel", "-k", help="only this rank's output")] = None,
    prefix: Annotated[
        bool | None, typer.Option("--prefix/--no-prefix", help="prefix lines with rank")
    ] = None,
) -> None:
    """Print a session's output: stdout to stdout; stderr, and the output of its image's build
    (stream `prepare`), to stderr.  --follow prints it as it is written and returns once the
    session has ended and all of it is printed (Ctrl-C stops); with --kernel it streams that
    rank's output over one connection."""
    api = connect()
    if follow_ and kernel is None:
        follow(api, session_id, prefix, quiet=True)
        return
    if follow_ and kernel is not None:
        printer = Printer(bool(prefix))
        try:
            for piece in api.sessions.stream_logs(session_id, kernel=kernel):
                printer.write(piece.rank, piece.stream, piece.text)
        except KeyboardInterrupt:
            raise typer.Exit(0) from None
        finally:
            printer.close()
        return
    cursor = 0
    while True:
        page = api.sessions.logs(session_id, after=cursor)
        for chunk in page.chunks:
            if kernel is None or chunk.rank == kernel:
                typer.echo(chunk.data, nl=False, err=chunk.stream != "stdout")
        if not page.chunks:
            return
        cursor = page.next


@app.command()
def history(session_id: SessionId, output: Format = OutputOpt) -> None:
    """Every outcome the coordinator recorded for a session: handler, result, message, time."""
    rows = connect().raw.sessions.history(session_id)
    emit(
        rows,
        output,
        [
            ("TIME", "created_at"),
            ("HANDLER", "handler"),
            ("RESULT", "result"),
            ("FROM", "from_status"),
            ("TO", "to_status"),
            ("COUNT", "count"),
            ("MESSAGE", "message"),
        ],
    )


@app.command()
def errors(session_id: SessionId, output: Format = OutputOpt) -> None:
    """Every failed worker's error record, the root cause first (primary errors vs side effects such
    as a peer gone or a stop sent by Corral)."""
    records = connect().sessions.errors(session_id)
    if output is not Format.table:
        emit(records, output)
        return
    rows = []
    for r in records:
        error = f"{r.type}: {r.message}" if r.type else r.message
        role = "ROOT CAUSE" if r.root_cause else ("primary" if r.primary else "side effect")
        rows.append({**r.dump(), "role_": role, "error": (error.strip().splitlines() or [""])[0][:200]})
    emit(
        rows,
        output,
        [
            ("", "role_"),
            ("WORKER", "worker"),
            ("RANK", "rank"),
            ("AGENT", "agent"),
            ("TIME", "timestamp"),
            ("RES", "resolution"),
            ("SOURCE", "source"),
            ("RECOVERABLE", "recoverable"),
            ("ERROR", "error"),
        ],
    )
    if not rows:
        typer.echo("no error records: no worker failed")


ATTEMPT_COLUMNS = [
    ("ATTEMPT", "attempt"),
    ("ID", "id"),
    ("NAME", "name"),
    ("STATUS", "status"),
    ("CAUSE", "cause"),
    ("EXIT", "exit_code"),
    ("AFTER", "retry_cause"),
    ("MANUAL", "manual_retry"),
    ("DECISION", "retry_reason"),
]


@app.command()
def attempts(session_id: SessionId, output: Format = OutputOpt) -> None:
    """Every attempt of the session's retry chain, with why each was made and decided."""
    emit(connect().raw.sessions.attempts(session_id), output, ATTEMPT_COLUMNS)


@app.command()
def retry(
    session_id: SessionId,
    force: Annotated[bool, typer.Option("--force", help="even if the chain succeeded")] = False,
    output: Format = OutputOpt,
) -> None:
    """Retry the chain's latest attempt (it must have ended, and not succeeded unless --force) with
    a fresh budget."""
    s = connect().sessions.retry(session_id, force=force)
    if output is Format.table:
        typer.echo(f"attempt {s.attempt}: {s.id}")
    else:
        emit(s, output)


@app.command()
def cancel(session_id: SessionId, output: Format = OutputOpt) -> None:
    """Ask a session to stop (a queued one is cancelled, a running one terminated).

    On an attempt that has ended, stops its retry chain: the retry waiting or running after it is
    cancelled, or a retry not yet made will not be.
    """
    s = connect().sessions.cancel(session_id)
    if output is not Format.table:
        emit(s, output)
        return
    # The answer is the session as the request left it: the coordinator moves it next cycle.
    short = s.id[:8]
    if s.ended:
        typer.echo(f"session {short} had ended ({s.status}): its retries are stopped")
    elif s.status in ("PENDING", "SUSPENDED"):
        typer.echo(f"session {short}: cancel accepted; it will be CANCELLED (it was {s.status})")
    else:
        typer.echo(
            f"session {short}: cancel accepted; it is TERMINATING (it was {s.status}): its kernels"
            f" are stopped, then `corral session info {short}` shows how it ended"
        )
