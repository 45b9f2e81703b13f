"""The vendored scripts are the upstream files byte for byte below their first line, which names
the package, version and sha256 (so an edit, or a swapped file, fails here)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
VENDORED = [
    ROOT / "src/corral/web/static/htmx.min.js",
    ROOT / "src/corral/web/static/htmx-sse.min.js",
    ROOT / "tests/support/vendor/axe.min.js",
]
HEADER = re.compile(
    rb"^/\* vendored: npm (\S+) (\d+\.\d+\.\d+) \S+, unchanged below this line;"
    rb" its sha256 ([0-9a-f]{64}) \*/\n"
)


@pytest.mark.parametrize("path", VENDORED, ids=lambda p: p.name)
def test_a_vendored_file_is_its_upstream_build(path: Path) -> None:
    data = path.read_bytes()
    header = HEADER.match(data)
    assert header, data[:200]
    assert hashlib.sha256(data[header.end() :]).hexdigest() == header.group(3).decode()


def test_the_pages_load_only_what_the_manager_serves() -> None:
    for template in (ROOT / "src/corral/web/templates").glob("*.html"):
        text = template.read_text()
        assert "http://" not in text and "https://" not in text, template.name  # no CDN
