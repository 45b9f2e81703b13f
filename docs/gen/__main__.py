"""`python -m docs.gen` (`make docs-gen`): writes every generated file and part of the site from the
code.  `--check` writes nothing and exits 1 naming each file that differs (what the tests check)."""

from __future__ import annotations

import sys

from docs.gen.outputs import ROOT, outputs


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path, text in outputs().items():
        if not path.is_file() or path.read_text() != text:
            stale.append(path.relative_to(ROOT))
            if not check:
                path.write_text(text)
    for path in stale:
        print(f"{'stale' if check else 'wrote'}: {path}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
