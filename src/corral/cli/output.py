"""`-o table|json|yaml` for every listing."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console


class Format(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


OutputOpt = typer.Option(Format.table, "-o", "--output", help="table, json or yaml")


def emit(data: Any, fmt: Format, columns: Sequence[tuple[str, str]] = (), title: str | None = None) -> None:
    """Print `data` (a result, a dict, or a list of them); `columns` are (header, key) for the table."""
    data = plain(data)
    if fmt is Format.json:
        typer.echo(json.dumps(data, indent=2, default=str))
        return
    if fmt is Format.yaml:
        import yaml

        typer.echo(yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=False).rstrip())
        return
    rows = data if isinstance(data, list) else [data]
    typer.echo(table_of(rows, columns, title))


def plain(data: Any) -> Any:
    """A client result as the API's JSON (dicts and lists pass through)."""
    if hasattr(data, "dump"):
        return data.dump()
    if isinstance(data, list):
        return [plain(d) for d in data]
    return data


def console() -> Console:
    from rich.console import Console

    # Piped output is read by scripts and grep: never cut it to a guessed 80 columns.
    return Console() if sys.stdout.isatty() else Console(width=1000)


def table_of(rows: list[Any], columns: Sequence[tuple[str, str]], title: str | None = None) -> str:
    """Rows as aligned columns under a header, as `kubectl get` prints them: one line per row
    whatever the terminal's width (for grep and awk), each cell on one line."""
    cells = [[header for header, _ in columns]]
    cells += [[_cell(row, key) for _, key in columns] for row in plain(rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells]
    return "\n".join(([title] if title else []) + lines)


def _cell(row: dict[str, Any], key: str) -> str:
    value: Any = row
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "-"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":")) if value else "-"
    if isinstance(value, str) and len(value) > 19 and value[4:5] == "-" and "T" in value:
        return value[:19].replace("T", " ")
    return " ".join(str(value).split()) or "-"


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
