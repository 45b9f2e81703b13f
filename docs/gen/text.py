"""Text from code (help strings, schema descriptions) made safe to put in Markdown."""

from __future__ import annotations

import re

_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
_SPECIAL = re.compile(r"([\\*_\[\]|])")
_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}


def escape(text: str) -> str:
    """Markdown's special characters escaped outside `code spans` (kept as written: help strings
    use them for commands), so that `CORRAL_*` or `[A-Za-z_]` read as written, not as emphasis,
    links or HTML."""
    out: list[str] = []
    last = 0
    for span in _CODE_SPAN.finditer(text):
        out.append(_plain(text[last : span.start()]))
        out.append(span.group(0))
        last = span.end()
    out.append(_plain(text[last:]))
    return "".join(out)


def _plain(text: str) -> str:
    text = re.sub(r"[<>&]", lambda m: _ENTITIES[m.group(0)], text)
    return _SPECIAL.sub(r"\\\1", text)


def code(text: str) -> str:
    """`text` as one code span, whatever backticks it holds."""
    ticks = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def paragraphs(text: str) -> list[str]:
    """A docstring's paragraphs, each on one line (blank lines separate them)."""
    blocks = re.split(r"\n\s*\n", text.strip())
    return [" ".join(line.strip() for line in block.splitlines()) for block in blocks if block.strip()]


def slug(text: str) -> str:
    """An anchor: lower case, runs of anything but letters and digits as one '-'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
