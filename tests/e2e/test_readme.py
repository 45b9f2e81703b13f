"""README.md as a newcomer reads it: short, naming only what exists, and its tour runs as written.

How the tour is read out of README.md (the convention the README keeps):

- Every ```console block is part of the tour, and they run in the order they appear, in one
  `bash -euo pipefail` script, so a shell variable (`id=$(corral run -d ...)`) or a `cd` carries
  from one command to the next.  ```sh blocks (`make up`, the PATH) are not run: the test does what
  they do itself, with a real `corral up` in a HOME of its own and the venv's `corral` on PATH.
- In a console block a line starting with `$ ` is a command, and each following line starting with
  `> ` continues it (the shell's PS2: a heredoc, a quoted newline).  Every other line is output.
- A command exits 0, unless its last line ends with `# exits N`: then it must exit N.
- The output lines shown must all appear in what the command prints (stdout and stderr together,
  as a terminal shows them), in that order; other lines may come between them.  Runs of spaces
  count as one, and `…` in a line stands for any text (ids, hosts, times).

The script starts in a temp directory (TMPDIR, for the tour's own `mktemp -d`) and stops at the
first command that exits otherwise than the README says.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import typer

from tests.support.embedded import Up

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_LINES = 250
TOUR_TIMEOUT = 240.0
"""Seconds for the whole tour (about 30 on an idle 2-core machine)."""
WILDCARD = "…"
EXITS = re.compile(r"#\s*exits\s+(\d+)\s*$")


@dataclass
class Command:
    line: int
    """Where it starts in README.md (1-based)."""
    text: str
    expected_code: int = 0
    expected_output: list[str] = field(default_factory=list)


@dataclass
class Block:
    lang: str
    line: int
    lines: list[str]


def blocks(text: str) -> list[Block]:
    """Every fenced code block, with its info string and first line's number."""
    found: list[Block] = []
    current: Block | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            if current is None:
                current = Block(line[3:].strip(), number + 1, [])
            else:
                found.append(current)
                current = None
        elif current is not None:
            current.lines.append(line)
    assert current is None, f"README.md: the code block from line {current.line} is never closed"
    return found


def tour(text: str) -> list[Command]:
    commands: list[Command] = []
    for block in blocks(text):
        if block.lang != "console":
            continue
        for offset, line in enumerate(block.lines):
            if line.startswith("$ "):
                commands.append(Command(block.line + offset, line[2:]))
            elif line.startswith("> ") or line == ">":
                assert commands and not commands[-1].expected_output, (
                    f"README.md:{block.line + offset}: a continuation line belongs right after its command"
                )
                commands[-1].text += "\n" + line[2:]
            elif line.strip():
                assert commands and commands[-1].line >= block.line, (
                    f"README.md:{block.line + offset}: output before any command of its block"
                )
                commands[-1].expected_output.append(line)
    for c in commands:
        exits = EXITS.search(c.text.splitlines()[-1])
        c.expected_code = int(exits.group(1)) if exits else 0
    return commands


def normal(line: str) -> str:
    return " ".join(line.split())


def pattern(shown: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in normal(shown).split(WILDCARD)))


def missing_output(shown: list[str], printed: str) -> str | None:
    """The first shown line that does not appear (in order) in what was printed, else None."""
    lines = [normal(x) for x in printed.splitlines()]
    at = 0
    for want in shown:
        p = pattern(want)
        while at < len(lines) and not p.fullmatch(lines[at]):
            at += 1
        if at == len(lines):
            return want
        at += 1
    return None


def script(commands: list[Command], out: Path) -> str:
    """One bash script: each command as written, its output and exit status kept per command."""
    parts = ["# the README's tour, as extracted by tests/e2e/test_readme.py"]
    for i, c in enumerate(commands):
        where = shlex.quote(str(out / str(i)))
        parts.append(
            f'set +e\n{{\n{c.text}\n}} >{where}.out 2>&1\nrc=$?\nset -e\necho "$rc" >{where}.rc\n'
            f'[ "$rc" -eq {c.expected_code} ] || exit 100'
        )
    return "\n".join(parts) + "\n"


def test_the_convention_reads_commands_codes_and_output() -> None:
    text = "\n".join(
        [
            "```sh",
            "make up",
            "```",
            "```console",
            "$ cat > f <<'EOF'",
            "> line",
            "> EOF",
            "$ corral run -- false   # exits 1",
            "corral: session … ERROR cause=kernel_nonzero_exit exit_code=1",
            "```",
        ]
    )
    first, second = tour(text)
    assert (first.line, first.text, first.expected_code) == (5, "cat > f <<'EOF'\nline\nEOF", 0)
    assert (second.expected_code, second.expected_output) == (1, [text.splitlines()[8]])
    printed = (
        "corral: session 1a2b PENDING\ncorral: session 1a2b ERROR   cause=kernel_nonzero_exit exit_code=1\n"
    )
    assert missing_output(second.expected_output, printed) is None
    assert missing_output(["a", "b"], "b\na\n") == "b", "in order"
    assert missing_output(["exit_code=1"], "exit_code=10\n") == "exit_code=1", "whole lines"


@pytest.fixture(scope="module")
def readme() -> str:
    return README.read_text()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    made = Up(tmp_path_factory.mktemp("readme") / "home")
    try:
        yield made
    finally:
        made.close()
        print(made.log()[-3000:])


def test_readme_is_a_short_guide(readme: str) -> None:
    lines = readme.splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines: at most {MAX_LINES}"
    # A user's guide: no commit hashes, no dates of runs (ids in the tour are shown as `…`).
    for number, line in enumerate(lines, 1):
        assert not re.search(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", line), (
            f"README.md:{number}: a commit hash or an id: {line}"
        )
        assert not re.search(r"\b20\d\d-\d\d-\d\d\b", line), f"README.md:{number}: a date: {line}"


def test_every_path_the_readme_names_exists(readme: str) -> None:
    """Links, and paths into the repository (docs/, src/, tests/, bench/, *.md), resolve in it.

    The docs/ pages are written beside this README: until they land, this names the missing ones."""
    missing: list[str] = []
    for number, line in enumerate(readme.splitlines(), 1):
        named = re.findall(r"\]\(([^)\s]+)\)", line)
        named = [t for t in named if not re.match(r"[a-z]+:|#", t)]
        named += re.findall(r"(?<![\w./~$-])((?:docs|src|tests|bench)/[\w./-]*\w)", line)
        named += re.findall(r"(?<![\w./~$-])([\w-]+\.md)\b", line)
        missing += [f"README.md:{number}: {t}" for t in named if not (ROOT / t.split("#")[0]).exists()]
    assert not missing, "\n".join(sorted(set(missing)))


def code_in(readme: str) -> list[tuple[int, str]]:
    """Every piece of code the README shows, with its line: inline spans and code block lines."""
    found: list[tuple[int, str]] = []
    fenced = ""
    for number, line in enumerate(readme.splitlines(), 1):
        if line.startswith("```"):
            fenced = "" if fenced else line[3:].strip() or "text"
            continue
        if fenced == "console":  # commands, not what they print
            if line.startswith(("$ ", "> ")):
                found.append((number, line[2:]))
        elif fenced:
            found.append((number, line.split("#", 1)[0]))
        else:
            found += [(number, span) for span in re.findall(r"`([^`]+)`", line)]
    return found


def test_every_command_and_option_the_readme_names_exists(readme: str) -> None:
    """`corral X Y --opt` anywhere in the README (prose too, not only the tour) is a real command
    with that option; `make X` a target of the Makefile."""
    from corral.cli.main import app

    root = typer.main.get_command(app)
    targets = set(re.findall(r"^([\w.-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    wrong: list[str] = []
    for number, code in code_in(readme):
        for target in re.findall(r"(?:^|[\s(;&|])make\s+([\w-]+)", code):
            if target not in targets:
                wrong.append(f"README.md:{number}: make {target}: no such target")
        for rest in re.findall(r"(?:^|[\s(;&|])corral((?:\s+[^\s|;)&#]+)*)", code):
            try:
                words = shlex.split(rest)
            except ValueError:
                words = rest.split()
            command: Any = root  # typer's own click (vendored): duck-typed
            said = ["corral"]
            value_next = False
            for word in words:
                if word == "--":
                    break
                if value_next:
                    value_next = False
                elif word.startswith("-"):
                    name, _, value = word.partition("=")
                    options = {o: p for p in command.params for o in (*p.opts, *p.secondary_opts)}
                    if name == "--help":
                        continue
                    if name not in options:
                        wrong.append(f"README.md:{number}: {' '.join(said)} has no option {name}")
                        continue
                    flag = getattr(options[name], "is_flag", True) or getattr(options[name], "count", False)
                    value_next = not flag and not value  # `--cpu 2`: the 2 is no command
                elif hasattr(command, "commands"):
                    sub = command.commands.get(word)
                    if sub is None:
                        wrong.append(f"README.md:{number}: no command {' '.join([*said, word])}")
                        break
                    command, said = sub, [*said, word]
    assert not wrong, "\n".join(wrong)


def test_the_tour_convention_is_kept(readme: str) -> None:
    commands = tour(readme)
    assert len(commands) >= 20, "the tour is read from the README's console blocks"
    texts = "\n".join(c.text for c in commands)
    for shown in ("--max-retries", "--cluster-size", "--array", "--priority", "session errors"):
        assert shown in texts, f"the tour shows {shown}"
    assert any(c.expected_code for c in commands), "the tour shows a failing gang"
    assert any("root cause: worker rank-1" in line for c in commands for line in c.expected_output)


def test_the_tour_runs_as_written(readme: str, up: Up, tmp_path: Path) -> None:
    commands = tour(readme)
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "corral").is_file(), f"the tour runs `corral` from PATH: none in {bin_dir}"
    out = tmp_path / "out"
    out.mkdir()
    scratch = tmp_path / "tmp"  # where the tour's `mktemp -d` makes its directory
    scratch.mkdir()
    scratch.chmod(0o1777)
    work = tmp_path / "cwd"
    work.mkdir()
    work.chmod(0o755)
    (tmp_path / "tour.sh").write_text(script(commands, out))
    # A user's shell: the environment `corral up` was started in (nothing Corral-specific but where
    # its config is), the venv's `corral` on PATH, and the usual umask, so kernels can read the
    # files the tour writes.
    env = {**up.env, "PATH": f"{bin_dir}{os.pathsep}{up.env.get('PATH', '')}", "TMPDIR": str(scratch)}
    try:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", str(tmp_path / "tour.sh")],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TOUR_TIMEOUT,
            umask=0o022,
        )
        ended = f"the tour exited {done.returncode}: {done.stderr}"
    except subprocess.TimeoutExpired:
        ended = f"the tour was stopped after {TOUR_TIMEOUT:.0f} s"
    for i, c in enumerate(commands):
        rc_file, out_file = out / f"{i}.rc", out / f"{i}.out"
        printed = out_file.read_text(errors="replace") if out_file.exists() else ""
        where = f"README.md:{c.line}: $ {c.text}"
        assert rc_file.exists(), f"{where}\nnever finished ({ended}); it printed:\n{printed}"
        code = int(rc_file.read_text())
        assert code == c.expected_code, (
            f"{where}\nexited {code}, the README says {c.expected_code}:\n{printed}"
        )
        absent = missing_output(c.expected_output, printed)
        assert absent is None, f"{where}\ndid not print (in order) {absent!r}; it printed:\n{printed}"
    assert ended.startswith("the tour exited 0"), ended
