"""The kernels' spawn helper is only ever run from a copy nobody else could have written, and a broken
cached build is replaced, never run for every kernel."""

from __future__ import annotations

import os
import platform
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import psutil
import pytest

from corral.agent import spawn
from tests.support.preload import euid_spy, euids

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="the helper needs a C compiler")

SOURCE = resources.files("corral.agent").joinpath("spawn.c").read_bytes()


def run(helper: str, *command: str) -> int:
    """`command`'s exit code through the helper, as the supervisor starts it (no cgroup or account)."""
    return spawn.trial(helper, "0", "-", "-", *command, env={"PATH": "/usr/bin:/bin"})


def _private_place() -> Path:
    """A directory that only root and we can write to, all the way up: our home if it is one (a HOME
    under /tmp is not: others can write there), else the system's cache root (as root) or the user's
    runtime directory."""
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.geteuid()}"
    for place in (Path.home(), Path("/var/cache"), Path(runtime)):
        if place.is_dir() and spawn._safe_dir(place):
            return place
    pytest.fail("no directory here is writable by root and us alone: the helper's cache cannot be tested")


@pytest.fixture
def private_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache home in a private place (a temp directory sits under /tmp, which others can write)."""
    cache = Path(tempfile.mkdtemp(prefix=".corral-test-cache-", dir=_private_place()))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    yield cache
    shutil.rmtree(cache)


def compiled(c_source: str, out: Path, *flags: str) -> Path:
    (out.parent / (out.name + ".c")).write_text(c_source)
    built = subprocess.run(["cc", *flags, "-o", str(out), str(out.parent / (out.name + ".c"))])
    assert built.returncode == 0
    return out


@pytest.mark.started_anyhow
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
@pytest.mark.started_anyhow
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


def built(flags: tuple[str, ...], tmp_path: Path) -> str:
    """spawn.c built with `flags`, loaded (and tried) as the supervisor loads the helper."""
    out = tmp_path / ("corral-spawn-" + str(len(flags)))
    compiled(SOURCE.decode(), out, "-O2", *flags)
    helper = spawn._loaded(out.read_bytes())
    assert helper is not None, "the build behaves"
    return helper


def outcome(helper: str, *argv: str, env: dict[str, str]) -> tuple[int, str]:
    """Exit code and what the first process wrote to stderr and stdout, as the supervisor starts it."""
    fd = spawn.env_file(env)
    read, write = os.pipe()
    actions = [(os.POSIX_SPAWN_DUP2, fd, spawn.ENV_FD), (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
    actions += [(os.POSIX_SPAWN_DUP2, write, 1), (os.POSIX_SPAWN_DUP2, write, 2)]
    try:
        pid = os.posix_spawn(helper, [helper, *argv], {}, file_actions=actions)
    finally:
        os.close(fd)
        os.close(write)
    with os.fdopen(read, "rb") as out:
        said = out.read().decode(errors="replace").strip()
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), said


BUILDS = {"without-libc": spawn._BARE, "static-libc": ("-static",)}
PATH = {"PATH": "/usr/bin:/bin"}


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="no bare build elsewhere")
@pytest.mark.parametrize("build", BUILDS)
def test_both_builds_start_a_command_as_execvp_would_and_fail_as_a_shell_does(
    build: str, tmp_path: Path
) -> None:
    """The build without a C library searches PATH, runs a script without a #! line, and says why
    it cannot run a command exactly as the C library's build (execvp, strerror) does."""
    helper = built(BUILDS[build], tmp_path)
    script = tmp_path / "no-hash-bang"
    script.write_text("echo ran $1 $X\n")
    script.chmod(0o755)
    denied = tmp_path / "denied"
    denied.mkdir()
    (denied / "tool").write_text("echo never\n")  # not executable: found, but refused

    def cannot(command: str, reason: str, code: int = 126) -> tuple[int, str]:
        return code, f"corral: cannot execute {command}: {reason}"

    missing, refused, big = "No such file or directory", "Permission denied", "Argument list too long"
    cases = [
        (("sh", "-c", "echo $X; exit 7"), {**PATH, "X": "1"}, (7, "1")),
        ((str(script), "a"), {**PATH, "X": "2"}, (0, "ran a 2")),
        (("true",), {}, (0, "")),  # no PATH: execvp's default
        (("/nonexistent/program",), PATH, cannot("/nonexistent/program", missing, 127)),
        (("no-such-program-x",), PATH, cannot("no-such-program-x", missing, 127)),
        (("/etc/passwd",), PATH, cannot("/etc/passwd", refused)),
        (("tool",), {"PATH": f"{denied}:/nonexistent"}, cannot("tool", refused)),  # said though later missing
        (("true",), {"PATH": ""}, cannot("true", missing, 127)),
        (("sh", "-c", "echo ${#BIG}"), {**PATH, "BIG": "y" * 200_000}, cannot("sh", big)),
        # Names and PATH entries too long: execvp refuses a name over 255 bytes, skips an entry
        # longer than a path may be, and stops at a component the system calls too long.
        (("z" * 256,), PATH, cannot("z" * 256, "File name too long")),
        (("z" * 255,), {"PATH": ""}, cannot("z" * 255, missing, 127)),
        (("nothing-here",), {"PATH": "/bin:/" + "d" * 5000}, cannot("nothing-here", missing, 127)),
        (("true",), {"PATH": "/" + "d" * 5000}, cannot("true", missing, 127)),
        (("true",), {"PATH": "/" + "a" * 300 + ":/bin"}, cannot("true", "File name too long")),
    ]
    for command, env, expected in cases:
        assert outcome(helper, "0", "-", "-", *command, env=env) == expected, command
    # Its own arguments: a count, files to join, then the account or "-" "-".
    cgroup = str(tmp_path / "gone" / "cgroup.procs")
    assert outcome(helper, "1", cgroup, "-", "-", "true", env=PATH) == (
        126,
        f"corral: cannot join cgroup {cgroup}: No such file or directory",
    )
    for bad in (["9", "-", "-", "true"], ["0", "x", "1", "true"], ["0", "4294967295", "0", "true"]):
        assert outcome(helper, *bad, env=PATH) == (126, "corral: corral-spawn: bad arguments"), bad
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        ids = (str(nobody.pw_uid), str(nobody.pw_gid))
        got = outcome(helper, "0", *ids, "sh", "-c", "id -u; id -g; id -G", env=PATH)
        assert got == (0, f"{nobody.pw_uid}\n{nobody.pw_gid}\n{nobody.pw_gid}"), "no supplementary group kept"


def test_a_build_without_libc_that_misbehaves_gives_way_to_the_c_librarys(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tried: list[bytes] = []

    def refused(binary: bytes) -> bool:
        tried.append(binary)
        return False

    monkeypatch.setattr(spawn, "_behaves", refused)
    out = tmp_path / "corral-spawn"
    spawn._compile(SOURCE, out)
    helper = spawn._loaded(out.read_bytes())
    assert helper is not None and run(helper, "sh", "-c", "exit 7") == 7
    if platform.machine() in ("x86_64", "aarch64"):
        assert len(tried) == 1 and tried[0] != out.read_bytes(), "the bare build was tried, then replaced"


def test_a_first_process_that_never_ends_fails_its_trial_and_is_killed() -> None:
    """The agent tries a new build before it keeps it: one that hangs must not hold up its start."""
    before = {c.pid for c in psutil.Process().children()}
    with pytest.raises(subprocess.TimeoutExpired):
        spawn.trial("/bin/sleep", "30", env={}, timeout=0.3)
    assert {c.pid for c in psutil.Process().children()} == before, "killed and reaped"
