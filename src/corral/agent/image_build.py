"""Requirements images built into virtualenvs under the agent's cache, one per (interpreter,
requirements) hash and shared by every session naming one.

A virtualenv is used only once its build finished: the marker READY is written last, so one left
half-built by a killed agent is never run in, and is removed before it is built again. Builds are
subprocesses awaited on the agent's loop (nothing else waits for them); sessions needing one hash
at once wait for one build. Its output is kept as `build.log` beside it, and copied as it comes
to the preparation log of each kernel waiting for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import shutil
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import structlog

from corral.agent.identity import reachable
from corral.agent.images import (
    KINDS,
    Environment,
    ImageSpec,
    Interpreter,
    Requirements,
    environment,
    shim_dir,
)

log = structlog.get_logger("corral.agent.image_build")

READY = "READY"
LOG = "build.log"
MESSAGE_LINES = 15


class BuildFailed(Exception):
    """The build of an image failed; the message ends with pip's last lines."""


class Builds:
    """The cache `root` (under the agent's work dir); `shared`: kernels run as other accounts, so
    what is built is made readable by all (it stays writable by the agent alone)."""

    def __init__(self, root: Path, shared: bool) -> None:
        self.root = root
        self.shared = shared
        self._running: dict[str, asyncio.Task[Path]] = {}
        self._logs: dict[str, _BuildLog] = {}

    def place(self, spec: Requirements) -> Path:
        return self.root / spec.key()

    def ready(self, spec: Requirements) -> Path | None:
        """The virtualenv when it is built."""
        place = self.place(spec)
        return place / "env" if (place / READY).is_file() else None

    async def build(self, name: str, spec: Requirements, copy_to: Path | None = None) -> Path:
        """The virtualenv, built first unless it is; one build per hash however many wait.
        `copy_to`: a file that gets the build's output, from its start, while this caller waits."""
        found = self.ready(spec)
        if found is not None:
            return found
        key = spec.key()
        task = self._running.get(key)
        if task is None:
            place = self.place(spec)
            shutil.rmtree(place, ignore_errors=True)  # a build that never finished
            place.mkdir(parents=True)
            self._logs[key] = _BuildLog(place / LOG)
            task = asyncio.create_task(self._build(name, spec, self._logs[key]), name=f"image-build:{name}")
            self._running[key] = task
            task.add_done_callback(lambda _: self._ended(key))
        copy = self._logs[key].add(copy_to) if copy_to is not None else None
        try:
            # Shielded: a waiter that goes (its kernel cancelled) does not stop the build for others.
            return await asyncio.shield(task)
        finally:
            if copy is not None:
                _BuildLog.remove(self._logs.get(key), copy)

    def _ended(self, key: str) -> None:
        self._running.pop(key, None)
        self._logs.pop(key).close()

    async def _build(self, name: str, spec: Requirements, out: _BuildLog) -> Path:
        place = self.place(spec)
        env = place / "env"
        python = str(env / "bin" / "python")
        install = ["install", "--disable-pip-version-check", "--no-input", "--progress-bar", "off"]
        if importlib.util.find_spec("pip") is not None:
            # A virtualenv without pip, filled by the agent's own pip: seconds less than ensurepip.
            steps = [
                [spec.interpreter(), "-m", "venv", "--without-pip", str(env)],
                [sys.executable, "-m", "pip", "--python", python, *install, *spec.requirements],
            ]
        else:
            steps = [
                [spec.interpreter(), "-m", "venv", str(env)],
                [python, "-m", "pip", *install, *spec.requirements],
            ]
        log.info("building image", image=name, key=spec.key(), requirements=len(spec.requirements))
        for argv in steps:
            out.write(("$ " + " ".join(argv) + "\n").encode())
            code = await _run(argv, out)
            if code != 0:
                tail = _tail(place / LOG)
                log.warning("image build failed", image=name, step=argv[2], exit_code=code)
                raise BuildFailed(f"building image {name!r} failed (exit {code}):\n{tail}")
        if self.shared:
            _readable_by_all(place)
        (place / READY).write_text(spec.model_dump_json())
        log.info("image built", image=name, key=spec.key())
        return env


class _BuildLog:
    """A build's output: its `build.log`, and the preparation logs of the kernels waiting for it
    (each given what was written before it came). Written from the agent's loop alone."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file: BinaryIO | None = path.open("ab")
        self.copies: list[BinaryIO] = []

    def write(self, data: bytes) -> None:
        for f in [self.file, *self.copies]:
            if f is not None:
                with contextlib.suppress(OSError):  # a full disk loses a copy, never the build
                    f.write(data)
                    f.flush()

    def add(self, path: Path) -> BinaryIO | None:
        try:
            copy = path.open("ab")
            copy.write(self.path.read_bytes())
            copy.flush()
        except OSError as exc:
            log.warning("cannot write a kernel's preparation log", path=str(path), error=exc.strerror)
            return None
        self.copies.append(copy)
        return copy

    @staticmethod
    def remove(build: _BuildLog | None, copy: BinaryIO) -> None:
        """`copy` gets no more (`build` may have ended already, or be a later build's)."""
        if build is not None and copy in build.copies:
            build.copies.remove(copy)
        copy.close()

    def close(self) -> None:
        for f in [self.file, *self.copies]:
            if f is not None:
                f.close()
        self.file, self.copies = None, []


async def _run(argv: list[str], out: _BuildLog) -> int:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except OSError as exc:
        out.write(f"cannot run {argv[0]}: {exc.strerror}\n".encode())
        return 127
    assert proc.stdout is not None
    try:
        while chunk := await proc.stdout.read(1 << 16):
            out.write(chunk)
        return await proc.wait()
    except asyncio.CancelledError:  # the agent stops: no build outlives it
        proc.kill()
        await proc.wait()
        raise


def _tail(path: Path) -> str:
    lines = path.read_text(errors="replace").splitlines()
    return "\n".join(lines[-MESSAGE_LINES:])[-1500:]


def _readable_by_all(root: Path) -> None:
    """Directories and executables r-x, files r-- for everyone; writable by the agent only."""
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            _add(Path(dirpath) / d, 0o755)
        for f in filenames:
            path = Path(dirpath) / f
            if not path.is_symlink():
                _add(path, 0o755 if os.access(path, os.X_OK) else 0o644)
    _add(root, 0o755)
    _add(root.parent, 0o755)


def _add(path: Path, mode: int) -> None:
    if path.is_symlink():
        return
    current = stat.S_IMODE(path.stat().st_mode)
    path.chmod((current | mode) & ~0o022)


class Images:
    """The images this agent offers: what each is, whether it is ready, the environment it gives."""

    def __init__(self, specs: dict[str, ImageSpec], root: Path, shared: bool) -> None:
        python = default_python(shared)
        self.specs = {
            name: spec.model_copy(update={"python": python})
            if isinstance(spec, Requirements) and spec.python is None
            else spec
            for name, spec in specs.items()
        }
        self.root = root
        self.shared = shared
        self.builds = Builds(root / "envs", shared)
        self._shims: dict[str, Path] = {}
        self.on_change: Callable[[], None] = lambda: None
        """Called when a build ends (whether an image is ready has changed)."""

    def publish(self) -> None:
        """Its cache directory, and an interpreter's `python` links, there for its kernels."""
        if not self.specs:
            return
        self.root.mkdir(exist_ok=True, mode=0o700)
        if self.shared:
            self.root.chmod(0o755)
        for name, spec in self.specs.items():
            if isinstance(spec, Interpreter):
                self._shims[name] = shim_dir(self.root, name, spec.python)

    def offered(self) -> dict[str, dict[str, Any]]:
        """Name -> its kind and whether it is ready (a requirements list: built), as agents list them."""
        return {
            name: {"kind": KINDS[type(spec)], "ready": self.ready(name) is not None}
            for name, spec in sorted(self.specs.items())
        }

    def ready(self, name: str) -> Environment | None:
        """Its environment, when nothing needs building first."""
        spec = self.specs[name]
        if isinstance(spec, Requirements):
            built = self.builds.ready(spec)
            return None if built is None else environment(spec, self.root, built)
        return environment(spec, self._shims.get(name, self.root))

    async def prepare(self, name: str, log: Path | None = None) -> Environment:
        """Its environment, built first if need be (BuildFailed if that fails); `log` gets the
        build's output."""
        spec = self.specs[name]
        assert isinstance(spec, Requirements), "only a requirements list is built"
        try:
            built = await self.builds.build(name, spec, log)
        finally:
            self.on_change()
        return environment(spec, self.root, built)


def default_python(shared: bool) -> str:
    """The interpreter a requirements list names none is built with: the agent's own, or, when
    kernels run as other accounts, the first `python3` on PATH they can all reach (the agent's
    may live in a home of its own)."""
    if shared:
        for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
            found = Path(d) / "python3"
            if d and os.access(found, os.X_OK) and reachable(found.resolve()):
                return str(found.resolve())
    return sys.executable
