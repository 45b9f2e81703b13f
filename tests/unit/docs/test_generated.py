"""The generated parts of the documentation site are what the code says today: the committed
openapi.json is the app's schema, the API and CLI references and the tables are what `make
docs-gen` writes, and every CLI command has an entry."""

from __future__ import annotations

import json
import re

import pytest

from docs.gen import api_reference, cli_reference, tables
from docs.gen.outputs import DOCS, REGENERATE, outputs, splice

STALE = f"is stale: run `{REGENERATE}` and commit what it writes"


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return {str(path.relative_to(DOCS)): text for path, text in outputs().items()}


def test_the_committed_schema_is_the_apps() -> None:
    committed = json.loads((DOCS / "openapi.json").read_text())
    assert committed == api_reference.schema(), f"docs/openapi.json {STALE}"


@pytest.mark.parametrize(
    "name", ["openapi.json", "api.md", "cli.md", "concepts.md", "operations.md"], ids=lambda n: n
)
def test_each_generated_file_is_committed_as_generated(generated: dict[str, str], name: str) -> None:
    assert (DOCS / name).read_text() == generated[name], f"docs/{name} {STALE}"


def test_the_api_page_renders_the_committed_schema() -> None:
    committed = json.loads((DOCS / "openapi.json").read_text())
    assert (DOCS / "api.md").read_text() == api_reference.render(committed), f"docs/api.md {STALE}"


def test_every_route_has_a_section() -> None:
    text = (DOCS / "api.md").read_text()
    spec = api_reference.schema()
    for path, item in spec["paths"].items():
        for method in item:
            assert f"### `{method.upper()} {path}`" in text, f"{method.upper()} {path}: docs/api.md {STALE}"


def _headings(text: str) -> list[str]:
    return re.findall(r"^#{2,6} (corral(?: [\w-]+)*)$", text, re.MULTILINE)


def test_every_cli_command_has_a_heading() -> None:
    from corral.cli.main import app

    headings = _headings((DOCS / "cli.md").read_text())
    paths = cli_reference.command_paths(app)
    missing = [p for p in paths if p not in headings]
    assert not missing, f"no entry in docs/cli.md for {', '.join(missing)}: docs/cli.md {STALE}"
    gone = [h for h in headings if h not in paths]
    assert not gone, f"docs/cli.md has entries for commands that are gone ({', '.join(gone)}): {STALE}"
    assert len(headings) == len(set(headings))


def test_the_command_tree_is_walked_whole() -> None:
    from corral.cli.main import app

    paths = cli_reference.command_paths(app)
    # Groups and the commands under them, two levels down, in --help's order.
    for expected in ("corral run", "corral session list", "corral user key revoke", "corral db upgrade"):
        assert expected in paths
    assert paths[0] == "corral"


def test_a_table_without_words_for_a_move_stops_the_generator() -> None:
    rows = [r for r in tables.SESSION_ROWS if r[1] != (tables.S.SUSPENDED,)]
    with pytest.raises(tables.Stale, match="moves without words: RUNNING -> SUSPENDED"):
        tables._check(rows, tables.SESSION_TRANSITIONS)
    extra = [*tables.SESSION_ROWS, ((tables.S.ERROR,), (tables.S.PENDING,), "never")]
    with pytest.raises(tables.Stale, match="words for moves the code refuses: ERROR -> PENDING"):
        tables._check(extra, tables.SESSION_TRANSITIONS)


def test_a_part_is_spliced_between_its_markers_only() -> None:
    from docs.gen.outputs import begin, end

    page = f"before\n{begin('x')}\n\nold\n{end('x')}\nafter\n"
    assert splice(page, "x", "new\n") == f"before\n{begin('x')}\n\nnew\n\n{end('x')}\nafter\n"
    with pytest.raises(ValueError, match="no markers"):
        splice("no markers here", "x", "new")
