"""The kernels' spawn helper is only ever run from a copy nobody else could have written, and a broken
cached build is replaced, never run for every kernel."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest

from corral.agent import spawn
from tests.support.preload import euid_spy, euids

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="the helper needs a C compiler")

SOURCE = resources.files("corral.agent").joinpath("spawn.c").read_bytes()


def run(helper: str, *command: str) -> int:
    """`command`'s exit code through the helper, as the supervisor starts it (no cgroup or account)."""
    return spawn.trial(helper, "0", "-", "-", *command, env={"PATH": "/usr/bin:/bin"})


@pytest.fixture
def private_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache home in our home directory (a temp directory sits under /tmp, which others can write)."""
    cache = Path(tempfile.mkdtemp(prefix=".corral-test-cache-", dir=Path.home()))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    yield cache
    shutil.rmtree(cache)


def compiled(c_source: str, out: Path, *flags: str) -> Path:
    (out.parent / (out.name + ".c")).write_text(c_source)
    built = subprocess.run(["cc", *flags, "-o", str(out), str(out.parent / (out.name + ".c"))])
    assert built.returncode == 0
    return out


def test_a_program_planted_in_a_cache_others_can_write_is_never_run(
    private_cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    shared = private_cache / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # every directory above is ours: this one alone makes the cache unsafe
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared))
    planted = spawn.cache_file(SOURCE)
    assert planted is not None and planted.parent.parent == shared
    planted.parent.mkdir(mode=0o700)
    marker = tmp_path / "planted-ran"
    compiled(f'#include <fcntl.h>\nint main(void) {{ return creat("{marker}", 0600) < 0; }}\n', planted)
    planted.chmod(0o700)
    planted_bytes = planted.read_bytes()
    helper = spawn.helper()
    assert helper is not None, "built privately instead"
    assert run(helper, "sh", "-c", "exit 7") == 7
    assert not marker.exists()
    assert planted.read_bytes() == planted_bytes, "the shared cache is not written either"


FIRST_PROCESSES = {
    "helper": lambda: [spawn.helper()],
    "fallback": lambda: [sys.executable, "-I", "-S", "-c", spawn.FALLBACK],
}


@pytest.mark.parametrize("first", FIRST_PROCESSES)
def test_a_cgroup_that_cannot_be_joined_fails_the_start_and_nothing_runs(first: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    start = [*FIRST_PROCESSES[first](), "2", os.devnull, str(tmp_path / "gone" / "cgroup.procs"), "-", "-"]
    code = spawn.trial(*start, "sh", "-c", f"touch {marker}", env={"PATH": "/usr/bin:/bin"})
    assert code == 126 and not marker.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="changing account needs root")
def test_even_a_dynamically_linked_helper_never_loads_the_kernels_preload_as_root(tmp_path: Path) -> None:
    """The static build ignores LD_PRELOAD anyway; a machine without a static libc gets a dynamic one,
    which must not see the kernel's environment before it runs as the kernel's account."""
    nobody = pwd.getpwnam("nobody")
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp).chmod(0o777)
        spy = euid_spy(Path(tmp))
        dynamic = tmp_path / "corral-spawn"
        spawn._compile(SOURCE, dynamic, static=False)
        helper = spawn._loaded(dynamic.read_bytes())
        assert helper is not None
        ids = (str(nobody.pw_uid), str(nobody.pw_gid))
        assert spawn.trial(helper, "0", *ids, "sh", "-c", "exit 0", env={"PATH": "/usr/bin:/bin", **spy}) == 0
        assert set(euids(spy)) == {str(nobody.pw_uid)}


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
