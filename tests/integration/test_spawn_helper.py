"""The kernels' spawn helper is only ever run from a copy nobody else could have written, and a broken
cached build is replaced, never run for every kernel."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest

from corral.agent import spawn

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="the helper needs a C compiler")

SOURCE = resources.files("corral.agent").joinpath("spawn.c").read_bytes()


def run(helper: str, *command: str) -> subprocess.CompletedProcess[str]:
    """`command` through the helper as the supervisor starts it (no cgroup, no account change)."""
    fd = int(helper.rsplit("/", 1)[1])
    argv = [helper, "0", "-", "-", "1", "PATH=/usr/bin:/bin", *command]
    return subprocess.run(argv, env={}, pass_fds=(fd,), capture_output=True, text=True, timeout=10)


def test_a_program_planted_in_a_cache_others_can_write_is_never_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # e.g. a cache directory under a world-writable one
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared))
    planted = spawn.cache_file(SOURCE)
    assert planted is not None and planted.parent.parent == shared
    planted.parent.mkdir(mode=0o700)
    marker = tmp_path / "planted-ran"
    planted.write_text(f"#!/bin/sh\ntouch {marker}\n")
    planted.chmod(0o700)
    helper = spawn.helper()
    assert helper is not None, "built privately instead"
    done = run(helper, "sh", "-c", "echo through-the-helper")
    assert (done.returncode, done.stdout) == (0, "through-the-helper\n"), done.stderr
    assert not marker.exists()
    assert planted.read_text().startswith("#!/bin/sh"), "the shared cache is not written either"


@pytest.fixture
def private_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache home in our home directory (a temp directory sits under /tmp, which others can write)."""
    cache = Path(tempfile.mkdtemp(prefix=".corral-test-cache-", dir=Path.home()))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    yield cache
    shutil.rmtree(cache)


def test_a_broken_cached_build_is_rebuilt(private_cache: Path) -> None:
    target = spawn.cache_file(SOURCE)
    assert target is not None and spawn._safe_cache(target), "a private cache is used"
    target.write_bytes(b"\x7fELF truncated")  # what a power loss before the write reached the disk leaves
    target.chmod(0o700)
    helper = spawn.helper()
    assert helper is not None
    assert run(helper, "true").returncode == 0
    assert target.read_bytes()[:4] == b"\x7fELF" and target.stat().st_size > 1000, "replaced by a good build"


def test_a_relative_cache_home_is_ignored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A relative path would be looked up from each kernel's own directory, which its account owns."""
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    monkeypatch.setenv("HOME", str(tmp_path))
    target = spawn.cache_file(SOURCE)
    assert target is not None and target.is_absolute() and target.parent == tmp_path / ".cache" / "corral"
