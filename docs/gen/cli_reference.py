"""docs/cli.md: every command of the Typer app (`corral.cli.main:app`), walked through Click's
command tree, with its usage line, help text, arguments and options."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import typer

from docs.gen.text import code, escape, paragraphs, slug

INTRO = """\
# CLI reference

Every command of `corral`, with its arguments and options, as `corral COMMAND --help` prints them.
This page is generated from the CLI itself (`make docs-gen`); a test keeps it equal to the CLI.

The CLI finds the manager from `CORRAL_URL` and `CORRAL_API_KEY`, else from the configuration
that `corral up` saved (see [Operations](operations.md#the-embedded-default-corral-up)). Every
command that prints a record or a list takes `-o table|json|yaml`. An error is one line on stderr
starting `error:`; see [Troubleshooting](troubleshooting.md).
"""


@dataclass(frozen=True)
class Entry:
    """One command of the tree: its words from `corral` on, the Click command and its context."""

    path: tuple[str, ...]
    command: Any
    context: typer.Context

    @property
    def name(self) -> str:
        return " ".join(self.path)

    @property
    def anchor(self) -> str:
        return slug(self.name)

    @property
    def is_group(self) -> bool:
        return hasattr(self.command, "list_commands")


def tree(app: typer.Typer) -> Iterator[Entry]:
    """Every command and group, depth first, in the order `--help` lists them; hidden ones left out."""
    root = typer.main.get_command(app)

    def walk(command: Any, path: tuple[str, ...], parent: typer.Context | None) -> Iterator[Entry]:
        ctx = typer.Context(command, info_name=path[-1], parent=parent)
        yield Entry(path, command, ctx)
        if hasattr(command, "list_commands"):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None and not getattr(sub, "hidden", False):
                    yield from walk(sub, (*path, name), ctx)

    yield from walk(root, ("corral",), None)


def command_paths(app: typer.Typer) -> list[str]:
    """`corral session list` and the like: every command's words."""
    return [e.name for e in tree(app)]


def _summary(command: Any) -> str:
    found = paragraphs(command.help or "")
    return found[0] if found else ""


def _section(entry: Entry, children: list[Entry]) -> list[str]:
    level = "#" * max(2, min(len(entry.path), 6))
    lines = [f"{level} {entry.name}", ""]
    usage = entry.command.get_usage(entry.context).removeprefix("Usage: ").strip()
    lines += ["```text", usage, "```", ""]
    for paragraph in paragraphs(entry.command.help or ""):
        lines += [escape(paragraph), ""]
    records = [(p, p.get_help_record(entry.context)) for p in entry.command.params]
    arguments = [(p, r) for p, r in records if r is not None and p.param_type_name == "argument"]
    options = [(p, r) for p, r in records if r is not None and p.param_type_name != "argument"]
    for title, shown in (("Arguments", arguments), ("Options", options)):
        if shown:
            lines += [f"**{title}**", ""]
            lines += [f"- {code(r[0])}" + (f": {escape(r[1])}" if r[1] else "") for _, r in shown]
            lines.append("")
    if children:
        lines += ["**Commands**", ""]
        lines += [f"- [{c.name}](#{c.anchor}): {escape(_summary(c.command))}" for c in children]
        lines.append("")
    return lines


def render(app: typer.Typer) -> str:
    entries = list(tree(app))
    lines = [INTRO]
    for entry in entries:
        children = [e for e in entries if e.path[:-1] == entry.path]
        lines += _section(entry, children)
    return "\n".join(lines).rstrip() + "\n"


def build() -> str:
    from corral.cli.main import app

    return render(app)
