"""The documentation site builds in strict mode (a broken link or anchor fails), every page is in
it, nothing is fetched from outside it at view time, and its sources hold no commit hash or date:
the measurement or story behind a rule belongs in its commit message."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from docs.gen.outputs import DOCS, ROOT

PAGES = [
    "index.md",
    "concepts.md",
    "retries.md",
    "root-cause.md",
    "preemption.md",
    "arrays.md",
    "deployments.md",
    "images.md",
    "events.md",
    "graphql.md",
    "web.md",
    "client.md",
    "operations.md",
    "troubleshooting.md",
    "api.md",
    "cli.md",
    "internals.md",
    "benchmarks.md",
]
# 7 to 40 hex digits with both a digit and a letter, standing alone (not inside a number like 9.2e+18).
COMMIT_HASH = re.compile(r"(?<![\w.])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w+])")
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
# Anything the browser would load: a script, a stylesheet, a font or an image from another site.
EXTERNAL = re.compile(
    r"<(?:script|link|img|iframe|source|embed)\b[^>]*\b(?:src|href)=[\"']?(?:https?:)?//", re.IGNORECASE
)


def _sources() -> list[Path]:
    found = [ROOT / "mkdocs.yml"]
    found += [p for p in sorted(DOCS.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    return found


def _config() -> dict[str, object]:
    class Loader(yaml.SafeLoader):
        pass

    # mkdocs.yml may use mkdocs' own tags (!ENV, !relative); none is needed to read what is tested.
    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    loaded = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)
    assert isinstance(loaded, dict)
    return loaded


def _nav_pages(nav: object) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [p for item in nav for p in _nav_pages(item)]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in _nav_pages(value)]
    return []


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=120,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return out


def test_every_page_is_in_the_nav_and_the_site(site: Path) -> None:
    nav = _nav_pages(_config()["nav"])
    assert sorted(nav) == sorted(PAGES)
    for page in PAGES:
        assert (DOCS / page).is_file(), page
        assert (site / page.replace(".md", ".html")).is_file(), page


def test_nothing_is_loaded_from_outside_the_site(site: Path) -> None:
    theme = _config()["theme"]
    assert isinstance(theme, dict) and theme.get("font") is False, "theme: font: false (no Google Fonts)"
    for page in sorted(site.rglob("*.html")):
        html = page.read_text()
        found = EXTERNAL.findall(html)
        assert not found, f"{page.name} loads {found[:3]} from outside the site"
        assert "fonts.googleapis" not in html and "fonts.gstatic" not in html, page.name
        # Material loads mermaid from a CDN for a diagram it finds: draw diagrams as text.
        assert 'class="mermaid"' not in html, page.name
    for sheet in sorted(site.rglob("*.css")):
        assert not re.search(r"@import\s+url\([\"']?https?:", sheet.read_text()), sheet.name


def test_the_sources_hold_no_commit_hash_or_date() -> None:
    for path in _sources():
        text = path.read_text(errors="replace")
        for pattern, what in ((COMMIT_HASH, "a commit hash"), (DATE, "a date")):
            found = pattern.search(text)
            if found:
                line = text.count("\n", 0, found.start()) + 1
                rel = path.relative_to(ROOT)
                pytest.fail(f"{rel}:{line} holds {what} ({found.group(0)}): keep it in the commit message")


def test_the_hash_pattern_finds_hashes_and_spares_numbers() -> None:
    assert COMMIT_HASH.findall("fixed in 4e39c04, and 0a55816fbe.") == ["4e39c04", "0a55816fbe"]
    assert not COMMIT_HASH.findall("9.223372036854776e+18 deadbeef 12345678 sha256 corral")
