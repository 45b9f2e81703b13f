"""`corral events`: the outbox of your projects, read back or followed live (the SSE stream)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from corral.cli.connect import connect
from corral.cli.output import Format, OutputOpt, emit

if TYPE_CHECKING:
    from corral.client.models import Event

EVENT_COLUMNS = [
    ("POSITION", "position"),
    ("TIME", "time"),
    ("ABOUT", "about"),
    ("EVENT", "event"),
    ("CHANGE", "change"),
    ("DETAIL", "detail"),
]
DETAIL_WIDTH = 28
"""So that a row fits 100 columns (the whole event: -o json)."""


def _row(e: Event) -> dict[str, Any]:
    detail = " ".join(f"{k}={v}" for k, v in e.payload.items())
    change = f"{e.from_status or '-'}>{e.to_status}" if e.to_status else ""
    return {
        "position": e.position,
        "time": f"{e.created_at:%m-%d %H:%M:%S}",
        "about": e.entity_id[:8] if e.entity_kind == "session" else f"{e.entity_kind}:{e.entity_id[:8]}",
        "event": e.type.removeprefix("session."),
        "change": change,
        "detail": detail if len(detail) <= DETAIL_WIDTH else detail[: DETAIL_WIDTH - 1] + "…",
    }


def events(
    type_: Annotated[
        list[str] | None,
        typer.Option("--type", "-t", help="only this type or glob (repeat), e.g. 'session.retry_*'"),
    ] = None,
    session: Annotated[str | None, typer.Option(help="only this session's events")] = None,
    array: Annotated[str | None, typer.Option(help="only this job array's events")] = None,
    project: Annotated[str | None, typer.Option(help="only this project's events")] = None,
    after: Annotated[
        str | None,
        typer.Option(help="the events after this position, oldest first (default: the newest)"),
    ] = None,
    limit: Annotated[int, typer.Option(help="at most this many (without --follow)")] = 100,
    follow_: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="print events as they commit, from now or --after (Ctrl-C stops)"
        ),
    ] = False,
    output: Format = OutputOpt,
) -> None:
    """Events of your projects, newest first (--follow: as they happen, oldest first).

    Status changes, retries, webhooks disabled; -o json gives each event whole, one per line
    with --follow.  A position (the first column) resumes a read: --after POSITION."""
    api = connect()
    filters: dict[str, Any] = {"type": type_, "session": session, "array": array, "project": project}
    try:
        if follow_:
            for e in api.stream_events(after, **filters):
                _print_one(e, output)
            return
        if after is None:
            rows = api.events.list(limit=limit, newest=True, **filters)
        else:
            rows = api.events.list(after, limit=limit, **filters)
        emit(rows if output is not Format.table else [_row(r) for r in rows], output, EVENT_COLUMNS)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def _print_one(e: Event, output: Format) -> None:
    """A followed event as one line (for grep): the whole entity id and type; or its JSON."""
    if output is not Format.table:
        import json

        typer.echo(json.dumps(e.dump(), default=str))
        return
    shown = {**_row(e), "about": e.entity_id, "event": e.type}
    typer.echo(" ".join(str(shown[key]) for _, key in EVENT_COLUMNS if shown[key] != ""))
