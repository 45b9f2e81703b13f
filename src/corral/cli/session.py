"""`corral session list|info|logs|history|attempts|retry|cancel`."""

from __future__ import annotations

import contextlib
import time
from typing import Annotated

import typer
from rich.live import Live
from rich.table import Table

from corral.cli.client import Api, fail
from corral.cli.follow import follow, root_cause_line
from corral.cli.output import Format, OutputOpt, console, emit, table_of

app = typer.Typer(help="Inspect and control sessions.", no_args_is_help=True)

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
ENDED = ("TERMINATED", "CANCELLED", "ERROR")


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
    params: dict[str, object] = {"status": [x.upper() for x in status or []], "limit": limit}
    if array is not None:
        params["array"] = array
    api = Api()
    if watch is None:
        emit(api.call("GET", "/sessions", params=params), output, SESSION_COLUMNS)
        return
    if not 0.2 <= watch <= 3600:
        raise fail("--watch: give 0.2 to 3600 seconds")

    def screen() -> Table:
        rows = api.call("GET", "/sessions", params=params)
        return table_of(rows, SESSION_COLUMNS, title=f"every {watch:g} s, {time.strftime('%H:%M:%S')}")

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
    s = Api().call("GET", f"/sessions/{session_id}")
    if output is not Format.table:
        emit(s, output)
        return
    attempt = f"attempt {s['attempt']} of {s['max_attempts']}"
    emit(s, output, SESSION_COLUMNS, title=f"session {s['name']} ({attempt})")
    typer.echo(f"{attempt}; retry state: {s['retry_state']}")
    if s.get("parent_session_id"):
        typer.echo(
            f"previous attempt: {s['parent_session_id']} (this one after {s.get('retry_cause') or '-'})"
        )
    if s.get("next_attempt_id"):
        typer.echo(f"next attempt: {s['next_attempt_id']}")
    if s.get("retry_reason"):
        typer.echo(f"retry decision: {s['retry_reason']}")
    if s.get("retry_after") and s["status"] == "PENDING":
        typer.echo(f"not before: {s['retry_after']}")
    if s.get("resume_count") or s["status"] == "SUSPENDED":
        for h in Api().call("GET", f"/sessions/{s['id']}/history"):
            if h["to_status"] == "SUSPENDED" or h["result"] == "RESUMED":
                what = "suspended" if h["to_status"] == "SUSPENDED" else "resumed"
                typer.echo(f"{what} at {h['created_at'][:19].replace('T', ' ')}: {h['message']}")
    kernels = [{**k, "exit": k["exit_code"], "oom": k["oom_killed"]} for k in s["kernels"]]
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
    if s.get("waiting_reason"):
        typer.echo(f"waiting: {s['waiting_reason']}")
    if s.get("root_cause"):
        rc = s["root_cause"]
        typer.echo(root_cause_line(rc))
        recoverable = {True: "yes", False: "no", None: "not said"}[rc.get("recoverable")]
        typer.echo(
            f"  exit {rc['exit_code']}, at {rc.get('timestamp') or '-'} (resolution {rc['resolution']}), "
            f"recoverable: {recoverable}, strategy {rc['strategy']}; all records: corral session errors ID"
        )


@app.command()
def logs(
    session_id: SessionId,
    follow_: Annotated[bool, typer.Option("--follow", "-f", help="keep printing until it ends")] = False,
    prefix: Annotated[
        bool | None, typer.Option("--prefix/--no-prefix", help="prefix lines with rank")
    ] = None,
) -> None:
    """Print a session's output (stdout to stdout, stderr to stderr)."""
    api = Api()
    if follow_:
        follow(api, session_id, prefix, quiet=True)
        return
    cursor = 0
    while True:
        page = api.call("GET", f"/sessions/{session_id}/logs", params={"after": cursor})
        for chunk in page["chunks"]:
            typer.echo(chunk["data"], nl=False, err=chunk["stream"] == "stderr")
        if not page["chunks"]:
            return
        cursor = page["next"]


@app.command()
def history(session_id: SessionId, output: Format = OutputOpt) -> None:
    """Every outcome the coordinator recorded for a session: handler, result, message, time."""
    rows = Api().call("GET", f"/sessions/{session_id}/history")
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
    rows = Api().call("GET", f"/sessions/{session_id}/errors")
    if output is not Format.table:
        emit(rows, output)
        return
    for r in rows:
        r["role_"] = "ROOT CAUSE" if r["root_cause"] else ("primary" if r["primary"] else "side effect")
        r["error"] = f"{r['type']}: {r['message']}" if r["type"] else r["message"]
        r["error"] = (r["error"].strip().splitlines() or [""])[0][:200]
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
    emit(Api().call("GET", f"/sessions/{session_id}/attempts"), output, ATTEMPT_COLUMNS)


@app.command()
def retry(
    session_id: SessionId,
    force: Annotated[bool, typer.Option("--force", help="even if the chain succeeded")] = False,
    output: Format = OutputOpt,
) -> None:
    """Retry the chain's latest attempt (it must have ended, and not succeeded unless --force) with
    a fresh budget."""
    s = Api().call("POST", f"/sessions/{session_id}/retry", params={"force": "true"} if force else None)
    if output is Format.table:
        typer.echo(f"attempt {s['attempt']}: {s['id']}")
    else:
        emit(s, output)


@app.command()
def cancel(session_id: SessionId, output: Format = OutputOpt) -> None:
    """Ask a session to stop (a queued one is cancelled, a running one terminated).

    On an attempt that has ended, stops its retry chain: the retry waiting or running after it is
    cancelled, or a retry not yet made will not be.
    """
    s = Api().call("POST", f"/sessions/{session_id}/cancel")
    if output is not Format.table:
        emit(s, output)
        return
    # The answer is the session as the request left it: the coordinator moves it next cycle.
    short = s["id"][:8]
    if s["status"] in ENDED:
        typer.echo(f"session {short} had ended ({s['status']}): its retries are stopped")
    elif s["status"] in ("PENDING", "SUSPENDED"):
        typer.echo(f"session {short}: cancel accepted; it will be CANCELLED (it was {s['status']})")
    else:
        typer.echo(
            f"session {short}: cancel accepted; it is TERMINATING (it was {s['status']}): its kernels"
            f" are stopped, then `corral session info {short}` shows how it ended"
        )
