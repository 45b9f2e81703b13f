"""`corral array info|wait|cancel|retry`, and following an array that `corral run --array` made."""

import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

from corral.cli.connect import connect
from corral.cli.output import Format, OutputOpt, emit

if TYPE_CHECKING:
    from corral.client import Client
    from corral.client.models import Array

app = typer.Typer(
    rich_markup_mode=None,
    help="Job arrays: one command over many indices ($CORRAL_ARRAY_INDEX).",
    no_args_is_help=True,
)
ArrayId = Annotated[str, typer.Argument(help="array id (from corral run --array)")]
ARRAY_COLUMNS = [("ARRAY", "array_id"), ("INDICES", "indices"), ("SIZE", "size"), ("SUCCEEDED", "succeeded")]
_ENDED = ("TERMINATED", "CANCELLED", "ERROR")


def _summary(a: "Array") -> str:
    counts = ", ".join(f"{n} {status}" for status, n in sorted(a.counts.items()))
    return f"array {a.array_id} ({a.indices}): {counts}; {a.succeeded} of {a.size} succeeded"


def wait_for(api: "Client", array_id: str, quiet: bool = False) -> "Array":
    """Poll until every element has ended and no retry of one is still to come; a progress bar on
    stderr (when it is a terminal, else one line at the end)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    a = api.arrays.get(array_id)
    console = Console(stderr=True)
    show = not quiet and console.is_terminal
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, disable=not show, transient=False) as bar:
        task = bar.add_task(f"array {array_id[:8]}", total=a.size)
        delay = 0.1
        while not a.settled:
            ended = sum(a.counts.get(s, 0) for s in _ENDED)
            running = a.counts.get("RUNNING", 0)
            bar.update(task, completed=ended, description=f"array {array_id[:8]} ({running} running)")
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)
            a = api.arrays.get(array_id)
        bar.update(task, completed=a.size, description=f"array {array_id[:8]}")
    if not quiet:
        print(f"corral: {_summary(a)}", file=sys.stderr)
    return a


def exit_code(a: "Array") -> int:
    """0 when every element succeeded, else 1 (each element's own code: corral session list --array)."""
    return 0 if a.succeeded == a.size else 1


@app.command()
def info(array_id: ArrayId, output: Format = OutputOpt) -> None:
    """Counts per status of each element's latest attempt (elements: corral session list --array)."""
    a = connect().arrays.get(array_id)
    if output is Format.table:
        typer.echo(_summary(a))
        return
    emit(a, output, ARRAY_COLUMNS)


@app.command()
def wait(
    array_id: ArrayId,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress on stderr")] = False,
) -> None:
    """Wait for every element (and its retries) to end; exits 0 only if every one succeeded."""
    raise typer.Exit(exit_code(wait_for(connect(), array_id, quiet)))


@app.command()
def cancel(array_id: ArrayId, output: Format = OutputOpt) -> None:
    """Cancel every live element; an ended one is not retried any more."""
    a = connect().arrays.cancel(array_id)
    typer.echo(_summary(a)) if output is Format.table else emit(a, output)


@app.command()
def retry(array_id: ArrayId, output: Format = OutputOpt) -> None:
    """Run again every element that ended without success (a manual retry each, fresh budget)."""
    a = connect().arrays.retry(array_id)
    if output is Format.table:
        typer.echo(f"retried {a.retried} element(s); {_summary(a)}")
    else:
        emit(a, output)
