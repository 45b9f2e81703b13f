"""`-o table|json|yaml` for every listing."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

import typer
import yaml
from rich.console import Console
from rich.table import Table
from rich.text import Text


class Format(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


OutputOpt = typer.Option(Format.table, "-o", "--output", help="table, json or yaml")


def emit(data: Any, fmt: Format, columns: Sequence[tuple[str, str]] = (), title: str | None = None) -> None:
    """Print `data` (a dict or a list of dicts); `columns` are (header, key) for the table."""
    if fmt is Format.json:
        typer.echo(json.dumps(data, indent=2, default=str))
        return
    if fmt is Format.yaml:
        typer.echo(yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=False).rstrip())
        return
    rows = data if isinstance(data, list) else [data]
    console().print(table_of(rows, columns, title))


def console() -> Console:
    # Piped output is read by scripts and grep: never cut it to a guessed 80 columns.
    return Console() if sys.stdout.isatty() else Console(width=1000)


def table_of(
    rows: list[dict[str, Any]], columns: Sequence[tuple[str, str]], title: str | None = None
) -> Table:
    # Cells are Text, never markup: a message such as "[/__w/pytorch/…/pair.cc:553]" is shown as
    # it is, not parsed (and refused) as a closing tag.
    table = Table(title=Text(title) if title else None, show_edge=False, header_style="bold")
    for header, _ in columns:
        table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*(Text(_cell(row, key)) for _, key in columns))
    return table


def _cell(row: dict[str, Any], key: str) -> str:
    value: Any = row
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return "-"
    if isinstance(value, str) and len(value) > 19 and value[4:5] == "-" and "T" in value:
        return value[:19].replace("T", " ")
    return str(value)


def binary_size(value: object) -> str | None:
    """Bytes as a person reads them: 23.5 GiB, 512 MiB, 100 B (binary units, as inputs take)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" or size == int(size) else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
