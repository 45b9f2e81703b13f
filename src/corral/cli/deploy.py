"""`corral deploy create|apply|list|get|scale|routes|history|rollout|delete`: long-running services
as health-checked replicas behind `/serve/NAME/`.

A deployment file is YAML (or JSON):

    apiVersion: corral/v1
    kind: Deployment
    metadata: {name: echo}
    spec:
      replicas: 3
      session: {command: [python3, server.py], resources: {cpu: 1}}
      health: {path: /health, interval: 10s}
"""

import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from corral.cli.connect import connect, fail
from corral.cli.output import Format, OutputOpt, emit

app = typer.Typer(
    rich_markup_mode=None,
    help="Deployments: replicas of a service, health-checked, reached at /serve/NAME/ on the manager.",
    no_args_is_help=True,
)
rollout_app = typer.Typer(rich_markup_mode=None, help="A deployment's rolling update.", no_args_is_help=True)
app.add_typer(rollout_app, name="rollout")

COLUMNS = [
    ("NAME", "name"),
    ("PROJECT", "project"),
    ("STATUS", "status"),
    ("READY", "ready"),
    ("DESIRED", "replicas"),
    ("REVISION", "revision"),
    ("ROLLOUT", "rollout"),
    ("MESSAGE", "message"),
]
ROUTE_COLUMNS = [
    ("ROUTE", "id"),
    ("STATUS", "status"),
    ("IN TRAFFIC", "in_traffic"),
    ("ADDRESS", "address"),
    ("HEALTH", "health"),
    ("REVISION", "revision"),
    ("SESSION", "session_id"),
]
HISTORY_COLUMNS = [
    ("AT", "last_at"),
    ("ROUTE", "route_id"),
    ("HANDLER", "handler"),
    ("RESULT", "result"),
    ("FROM", "from_status"),
    ("TO", "to_status"),
    ("COUNT", "count"),
    ("MESSAGE", "message"),
]
FileOpt = Annotated[
    Path, typer.Option("-f", "--file", help="deployment YAML or JSON (kind: Deployment); - for stdin")
]


def _document(file: Path) -> dict[str, Any]:
    import yaml

    from corral.client.deployments import spec_of

    try:
        text = sys.stdin.read() if str(file) == "-" else file.read_text()
        doc = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise fail(f"cannot read {file}: {exc}", 2) from None
    try:
        return spec_of(doc)
    except ValueError as exc:
        raise fail(f"{file}: {exc}", 2) from None


def _shown(d: dict[str, Any], output: Format) -> None:
    emit(d, output, COLUMNS)
    if output is Format.table:
        reachable = "yes" if d["ready"] else "no (no replica in traffic yet)"
        typer.echo(f"reachable at /serve/{d['name']}/: {reachable}")


@app.command("create")
def create(file: FileOpt, output: Format = OutputOpt) -> None:
    """Create the deployment FILE describes; its replicas start at once."""
    _shown(connect().raw.deployments.create(_document(file)), output)


@app.command("apply")
def apply(file: FileOpt, output: Format = OutputOpt) -> None:
    """Create it, or change it to what FILE says (a new session or health check rolls out)."""
    from corral.client.errors import CorralError

    body = _document(file)
    api = connect().raw.deployments
    try:
        api.get(body["name"])
    except CorralError as exc:
        if exc.status != 404:
            raise
        _shown(api.create(body), output)
        return
    _shown(api.update(body["name"], {k: v for k, v in body.items() if k != "name"}), output)


@app.command("list")
def list_deployments(output: Format = OutputOpt) -> None:
    """The deployments you may see: desired and ready replicas, status, rollout."""
    emit(connect().raw.deployments.list(), output, COLUMNS)


@app.command("get")
def get(name: str, output: Format = OutputOpt) -> None:
    """One deployment, its routes, and whether /serve/NAME/ is reachable."""
    d = connect().raw.deployments.get(name)
    _shown(d, output)
    if output is Format.table and d["routes"]:
        emit(d["routes"], output, ROUTE_COLUMNS)


@app.command("scale")
def scale(
    name: str, replicas: Annotated[int, typer.Argument(min=0, max=100)], output: Format = OutputOpt
) -> None:
    """Ask for REPLICAS replicas: surplus ones drain first (not HEALTHY ones, then the newest)."""
    _shown(connect().raw.deployments.scale(name, replicas), output)


@app.command("routes")
def routes(name: str, output: Format = OutputOpt) -> None:
    """Service discovery: every route's address, health and whether it is in traffic."""
    emit(connect().raw.deployments.routes(name), output, ROUTE_COLUMNS)


@app.command("history")
def history(name: str, output: Format = OutputOpt) -> None:
    """Every handler outcome for the deployment and its routes, oldest first."""
    emit(connect().raw.deployments.history(name), output, HISTORY_COLUMNS)


@app.command("delete")
def delete(name: str, output: Format = OutputOpt) -> None:
    """Drain and stop every replica; the deployment then ends DESTROYED."""
    _shown(connect().raw.deployments.delete(name), output)


@rollout_app.command("status")
def rollout_status(
    name: str,
    wait: Annotated[
        float,
        typer.Option(help="seconds to wait for the rollout to finish (exit 1 if it does not or stalls)"),
    ] = 0.0,
    output: Format = OutputOpt,
) -> None:
    """Where the current revision's rollout is; with --wait, follow it until READY."""
    api = connect().raw.deployments
    deadline = time.monotonic() + wait
    while True:
        d = api.get(name)
        done = d["status"] == "READY" and not d["rollout"]
        if output is Format.table:
            state = "complete" if done else (d["rollout"] or d["status"].lower())
            said = f"revision {d['revision']}: {d['ready']}/{d['replicas']} ready, {state}."
            typer.echo(f"{said} {d['message']}".rstrip())
        else:
            emit(d, output, COLUMNS)
        if done or wait <= 0:
            return
        if d["rollout"] == "stalled":
            raise fail(f"the rollout of revision {d['revision']} stopped: {d['message']}")
        if time.monotonic() >= deadline:
            raise fail(f"not complete after {wait:g} s")
        time.sleep(1.0)


@rollout_app.command("undo")
def rollout_undo(name: str, output: Format = OutputOpt) -> None:
    """Roll back to the revision before the current one (it becomes a new revision)."""
    _shown(connect().raw.deployments.undo(name), output)
