"""The kernels' spawn helper is only ever run from a copy nobody else could have written, and a broken
cached build is replaced, never run for every kernel."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest

from corral.agent import spawn

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="the helper needs a C compiler")

SOURCE = resources.files("corral.agent").joinpath("spawn.c").read_bytes()


def run(helper: str, *command: str) -> int:
    """`command`'s exit code through the helper, as the supervisor starts it (no cgroup or account)."""
    return spawn.trial(helper, "0", "-", "-", *command, env={"PATH": "/usr/bin:/bin"})


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
    assert run(helper, "sh", "-c", "exit 7") == 7
    assert not marker.exists()
    assert planted.read_text().startswith("#!/bin/sh"), "the shared cache is not written either"


@pytest.fixture
def private_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache home in our home directory (a temp directory sits under /tmp, which others can write)."""
    cache = Path(tempfile.mkdtemp(prefix=".corral-test-cache-", dir=Path.home()))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    yield cache
    shutil.rmtree(cache)


@pytest.mark.parametrize(
    "planted",
    [
        # What a power loss before the write reached the disk leaves.
        b"\x7fELF truncated",
        # Another program: it would run, exit 0, and have every kernel "succeed" without running.
        Path("/bin/true").read_bytes(),
    ],
    ids=["truncated", "another-program"],
)
def test_a_cached_file_that_is_not_a_working_helper_is_replaced(private_cache: Path, planted: bytes) -> None:
    target = spawn.cache_file(SOURCE)
    assert target is not None and spawn._safe_cache(target), "a private cache is used"
    target.write_bytes(planted)
    target.chmod(0o700)
    helper = spawn.helper()
    assert helper is not None
    assert run(helper, "sh", "-c", "exit 7") == 7
    assert target.read_bytes() != planted, "the cache holds the good build now"


def test_a_relative_cache_home_is_ignored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A relative path would be looked up from each kernel's own directory, which its account owns."""
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    monkeypatch.setenv("HOME", str(tmp_path))
    target = spawn.cache_file(SOURCE)
    assert target is not None and target.is_absolute() and target.parent == tmp_path / ".cache" / "corral"
