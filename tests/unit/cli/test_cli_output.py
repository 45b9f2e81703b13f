"""Every CLI table shows its strings as they are: text in brackets is never read as Rich markup."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence
from typing import Any

import pytest

import corral.cli
from corral.cli.output import Format, binary_size, emit

MARKUP = "[/x] [bold]y[/bold] [/__w/pytorch/third_party/gloo/pair.cc:553]"


def _column_sets() -> list[tuple[str, Sequence[tuple[str, str]]]]:
    found = []
    for info in pkgutil.iter_modules(corral.cli.__path__):
        module = importlib.import_module(f"corral.cli.{info.name}")
        for name, value in vars(module).items():
            if name.endswith("_COLUMNS"):
                found.append((f"{info.name}.{name}", value))
    return found


def _row(columns: Sequence[tuple[str, str]]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for _, key in columns:
        *parents, last = key.split(".")
        node = row
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = MARKUP
    return row


SETS = _column_sets()


def test_every_column_set_was_found() -> None:
    assert {"session.SESSION_COLUMNS", "session.ATTEMPT_COLUMNS", "events.EVENT_COLUMNS"} <= {
        n for n, _ in SETS
    }


@pytest.mark.parametrize(("name", "columns"), SETS, ids=[n for n, _ in SETS])
def test_a_table_prints_markup_literally(
    name: str, columns: Sequence[tuple[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    emit([_row(columns)], Format.table, columns, title=f"{MARKUP} {name}")
    out = capsys.readouterr().out
    assert out.count(MARKUP) == len(columns) + 1  # every cell, and the title


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0, "0 B"),
        (100, "100 B"),
        (1024, "1 KiB"),
        (512 * 2**20, "512 MiB"),
        (25275990016, "23.5 GiB"),
        (3 * 2**40, "3 TiB"),
        (2**52, "4096 TiB"),
        (None, None),
        ("64M", None),
    ],
)
def test_sizes_are_shown_in_binary_units(value: object, shown: str | None) -> None:
    assert binary_size(value) == shown
