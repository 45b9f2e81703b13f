"""`corral webhook create|list|get|update|delete|rotate|test|deliveries|redeliver`: where events
are POSTed, signed (Standard Webhooks), and how each delivery went."""

import time
from typing import Annotated, Any

import typer

from corral.cli.connect import connect, fail
from corral.cli.output import Format, OutputOpt, emit

app = typer.Typer(
    rich_markup_mode=None,
    help="Webhooks: events POSTed to your URL, signed; admins' may be cluster-wide, a member's are"
    " their project's.",
    no_args_is_help=True,
)

COLUMNS = [
    ("ID", "id"),
    ("URL", "url"),
    ("EVENTS", "events"),
    ("PROJECT", "project"),
    ("ENABLED", "enabled"),
    ("DISABLED BECAUSE", "disabled_reason"),
]
DELIVERY_COLUMNS = [
    ("EVENT", "event_id"),
    ("TYPE", "event_type"),
    ("STATUS", "status"),
    ("ATTEMPTS", "attempts"),
    ("CODE", "response_code"),
    ("LATENCY MS", "latency_ms"),
    ("LAST", "last_attempt_at"),
    ("NEXT", "next_attempt_at"),
    ("ERROR", "error"),
]

EventsOpt = Annotated[
    list[str] | None,
    typer.Option("--events", "-e", help="event type or glob (repeat), e.g. 'session.retry_*'"),
]


def _with_secret(made: Any, output: Format) -> None:
    emit(made, output, [*COLUMNS, ("SECRET", "secret")])
    if output is Format.table:
        typer.echo("Keep the secret now: no later answer shows it (corral webhook rotate gives a new one).")


@app.command("create")
def create(
    url: Annotated[str, typer.Argument(help="http(s) URL to POST events to")],
    events: EventsOpt = None,
    project: Annotated[
        str | None, typer.Option(help="only this project's events (required unless admin)")
    ] = None,
    description: Annotated[str, typer.Option(help="a note for people")] = "",
    disabled: Annotated[bool, typer.Option("--disabled", help="create it disabled")] = False,
    output: Format = OutputOpt,
) -> None:
    """Create a webhook; prints its signing secret, once."""
    if not events:
        raise fail("give at least one --events TYPE (e.g. --events 'session.*')", 2)
    made = connect().raw.webhooks.create(url, events, project, description, not disabled)
    _with_secret(made, output)


@app.command("list")
def list_webhooks(output: Format = OutputOpt) -> None:
    """The webhooks you may see."""
    emit(connect().raw.webhooks.list(), output, COLUMNS)


@app.command("get")
def get(webhook_id: str, output: Format = OutputOpt) -> None:
    """One webhook: its URL, event types, project, and whether (and why not) it is enabled."""
    emit(connect().raw.webhooks.get(webhook_id), output, COLUMNS)


@app.command("update")
def update(
    webhook_id: str,
    url: Annotated[str | None, typer.Option(help="a new URL")] = None,
    events: EventsOpt = None,
    description: Annotated[str | None, typer.Option(help="a new note")] = None,
    enable: Annotated[
        bool | None, typer.Option("--enable/--disable", help="enabling retries at once")
    ] = None,
    output: Format = OutputOpt,
) -> None:
    """Change what is given."""
    changes: dict[str, Any] = {}
    for key, value in (("url", url), ("events", events), ("description", description), ("enabled", enable)):
        if value is not None:
            changes[key] = value
    if not changes:
        raise fail("nothing to change: give --url, --events, --description, --enable or --disable", 2)
    emit(connect().raw.webhooks.update(webhook_id, **changes), output, COLUMNS)


@app.command("delete")
def delete(webhook_id: str) -> None:
    """Delete it and its delivery records; nothing more is sent to it."""
    connect().raw.webhooks.delete(webhook_id)
    typer.echo(f"webhook {webhook_id} deleted")


@app.command("rotate")
def rotate(webhook_id: str, output: Format = OutputOpt) -> None:
    """A new secret; the old one keeps signing beside it for 24 h."""
    _with_secret(connect().raw.webhooks.rotate_secret(webhook_id), output)


@app.command("test")
def test(
    webhook_id: str,
    wait: Annotated[float, typer.Option(help="seconds to wait for the delivery's first attempt")] = 30.0,
    output: Format = OutputOpt,
) -> None:
    """Send a `webhook.test` event to this webhook alone and show how its delivery went."""
    client = connect().raw.webhooks
    seen = {d["event_id"] for d in client.deliveries(webhook_id, status=None)}
    client.test(webhook_id)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        fresh = [
            d
            for d in client.deliveries(webhook_id)
            if d["event_type"] == "webhook.test" and d["event_id"] not in seen
        ]
        if fresh:
            emit(fresh[0], output, DELIVERY_COLUMNS)
            if fresh[0]["status"] != "delivered":
                raise typer.Exit(1)
            return
        time.sleep(0.2)
    raise fail(f"no attempt within {wait:g} s: is a manager running, and the webhook enabled?", 1)


@app.command("deliveries")
def deliveries(
    webhook_id: str,
    limit: Annotated[int, typer.Option(help="at most this many, the latest first")] = 20,
    status: Annotated[str | None, typer.Option(help="pending, delivered, failed or requeued")] = None,
    output: Format = OutputOpt,
) -> None:
    """Its deliveries: status, attempts, the last answer."""
    emit(connect().raw.webhooks.deliveries(webhook_id, limit, status), output, DELIVERY_COLUMNS)


@app.command("redeliver")
def redeliver(webhook_id: str, event_id: int, output: Format = OutputOpt) -> None:
    """Send one event again (the same webhook-id)."""
    emit(connect().raw.webhooks.redeliver(webhook_id, event_id), output, DELIVERY_COLUMNS)
