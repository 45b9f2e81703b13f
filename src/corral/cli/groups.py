"""`corral rg list|get|set` (admin): resource groups and their preemption settings."""

from typing import Annotated, Any

import typer

from corral.cli.connect import connect, fail
from corral.cli.output import Format, OutputOpt, emit

app = typer.Typer(
    rich_markup_mode=None,
    help="Resource groups: preemption and queue settings (admin).",
    no_args_is_help=True,
)

COLUMNS = [
    ("NAME", "name"),
    ("PREEMPTIBLE ≤", "preemptible_priority"),
    ("ORDER", "preemption_order"),
    ("MODE", "preemption_mode"),
    ("GRACE", "grace_period"),
    ("MIN RUNTIME", "min_runtime"),
    ("PENDING TIMEOUT", "pending_timeout"),
    ("MAX RESCHEDULES", "max_reschedules"),
    ("AGENTS", "agents"),
]
NUMBERS = {
    "preemptible_priority": int,
    "grace_period": float,
    "min_runtime": float,
    "pending_timeout": float,
    "max_reschedules": int,
}


@app.command("list")
def list_groups(output: Format = OutputOpt) -> None:
    """Every resource group."""
    emit(connect().raw.groups.list(), output, COLUMNS)


@app.command("get")
def get(name: str, output: Format = OutputOpt) -> None:
    """One resource group."""
    emit(connect().raw.groups.get(name), output, COLUMNS)


@app.command("set")
def set_(
    name: str,
    settings: Annotated[
        list[str],
        typer.Argument(
            help="KEY=VALUE: preemptible_priority (0..100), preemption_order (oldest|newest), "
            "preemption_mode (terminate|suspend), grace_period (s), min_runtime (s); queue: "
            "pending_timeout (s, 0: wait for ever), max_reschedules"
        ),
    ],
    output: Format = OutputOpt,
) -> None:
    """Change settings; every manager uses them from its next cycle."""
    body: dict[str, Any] = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep:
            raise fail(f"expected KEY=VALUE, got {item!r}", 2)
        try:
            body[key] = NUMBERS[key](value) if key in NUMBERS else value
        except ValueError:
            raise fail(f"{key} expects a number, got {value!r}", 2) from None
    emit(connect().raw.groups.update(name, **body), output, COLUMNS)
