"""Debian's Chromium under Playwright, headless, and axe-core (vendored) run on a page.

Playwright's own browser download cannot work here; with CI set, a missing Chromium fails the
browser tests rather than skipping them."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = ("/usr/lib/chromium/chromium", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
AXE = Path(__file__).resolve().parent / "vendor" / "axe.min.js"


def chromium() -> str:
    for path in CHROMIUM:
        if os.access(path, os.X_OK):
            return path
    found = shutil.which("chromium")
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail(
            "no chromium: `make browser` installs Debian's (the browser suite may not be skipped in CI)"
        )
    pytest.skip("no chromium (make browser installs it)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium(), headless=True, args=ARGS)
        try:
            yield b
        finally:
            b.close()


def serious_violations(page: Any) -> list[dict[str, Any]]:
    """axe-core's critical and serious findings on the page as it is now."""
    page.add_script_tag(content=AXE.read_text())
    found: list[dict[str, Any]] = page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ['violations']})).violations
            .filter(v => v.impact === 'critical' || v.impact === 'serious')
            .map(v => ({id: v.id, impact: v.impact, help: v.help,
                        nodes: v.nodes.map(n => n.html).slice(0, 3)}))"""
    )
    return found
