"""Image specs as an operator writes them, and the environment a kernel gets from each."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from corral.agent.image_build import BuildFailed, Images
from corral.agent.images import (
    BinDir,
    ImageError,
    Interpreter,
    Requirements,
    Venv,
    environment,
    parse,
    parse_option,
)


def test_each_kind_parses_from_its_json(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    found = parse(
        {
            "py": {"python": sys.executable},
            "env": {"venv": str(venv)},
            "tools": {"path": str(tmp_path)},
            "numpy": {"requirements": ["numpy==2.1"]},
        }
    )
    assert found == {
        "py": Interpreter(python=sys.executable),
        "env": Venv(venv=str(venv)),
        "tools": BinDir(path=str(tmp_path)),
        "numpy": Requirements(requirements=["numpy==2.1"]),
    }


@pytest.mark.parametrize(
    ("specs", "said"),
    [
        ({"a": {"python": "python3"}}, "image 'a': give one of"),
        ({"a": {"pyhton": "/usr/bin/python3"}}, "image 'a': give one of"),
        ({"a": "/usr/bin/python3"}, "image 'a': its spec must be a JSON object"),
        ({"a": {"requirements": []}}, "image 'a': give one of"),
        ({"a": {"requirements": ["x" * 501]}}, "image 'a': give one of"),
        ({"a": {"requirements": ["numpy\x00"]}}, "image 'a': give one of"),
        ({"a": {"python": "/usr/bin/python3\x00"}}, "image 'a': give one of"),
        ({"a": {"python": "/no/such/python"}}, "image 'a': /no/such/python is not an executable file"),
        ({"a": {"venv": "/"}}, "image 'a': / is not a virtualenv (no bin/python)"),
        ({"a": {"path": "/no/such/dir"}}, "image 'a': /no/such/dir is not a directory"),
        ({"": {"path": "/"}}, "image '': a name of 1 to 128 characters"),
        ({"x" * 129: {"path": "/"}}, "a name of 1 to 128 characters"),
    ],
)
def test_a_spec_that_cannot_be_used_is_refused_naming_its_image(specs: dict, said: str) -> None:
    with pytest.raises(ImageError) as caught:
        parse(specs)
    assert said in str(caught.value)


def test_the_option_is_name_equals_json() -> None:
    assert parse_option(['py={"python": "/usr/bin/python3"}']) == {"py": {"python": "/usr/bin/python3"}}
    with pytest.raises(ImageError, match="give NAME=JSON"):
        parse_option(["py"])
    with pytest.raises(ImageError, match="image 'py': its spec is not JSON"):
        parse_option(["py={python}"])


def test_one_build_per_interpreter_and_requirements() -> None:
    a = Requirements(requirements=["numpy"], python="/usr/bin/python3")
    assert a.key() == Requirements(requirements=["numpy"], python="/usr/bin/python3").key()
    assert a.key() != Requirements(requirements=["numpy"], python="/usr/bin/python3.12").key()
    assert a.key() != Requirements(requirements=["numpy", "scipy"], python="/usr/bin/python3").key()


def test_a_kernel_finds_its_images_programs_first(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONHOME": "/elsewhere"}
    environment(Venv(venv="/opt/v"), tmp_path).apply(env)
    assert env["PATH"] == "/opt/v/bin:/usr/bin:/bin" and env["VIRTUAL_ENV"] == "/opt/v"
    assert "PYTHONHOME" not in env  # it would point the venv's python elsewhere
    tools = {"PATH": "/usr/bin"}
    environment(BinDir(path="/opt/tools"), tmp_path).apply(tools)
    assert tools == {"PATH": "/opt/tools:/usr/bin"}


def test_an_interpreter_is_python_and_python3_on_path(tmp_path: Path) -> None:
    images = Images({"py": Interpreter(python=sys.executable)}, tmp_path / "images", shared=True)
    images.publish()
    ready = images.ready("py")
    assert ready is not None and ready.virtual_env is None
    [shims] = ready.bin_dirs
    for name in ("python", "python3"):
        assert os.path.realpath(Path(shims) / name) == os.path.realpath(sys.executable)
    assert oct((tmp_path / "images").stat().st_mode & 0o777) == "0o755"  # other accounts reach it
    assert images.offered() == {"py": {"kind": "python", "ready": True}}


def test_a_requirements_list_is_not_ready_until_built(tmp_path: Path) -> None:
    images = Images({"np": Requirements(requirements=["numpy"])}, tmp_path / "images", shared=False)
    assert images.ready("np") is None
    assert images.offered() == {"np": {"kind": "requirements", "ready": False}}
    place = images.builds.place(images.specs["np"])  # type: ignore[arg-type]
    (place / "env" / "bin").mkdir(parents=True)
    assert images.ready("np") is None, "a virtualenv without its READY marker is half-built"
    (place / "READY").write_text("{}")
    assert images.ready("np") == environment(images.specs["np"], tmp_path, place / "env")


def test_every_kernel_waiting_for_one_build_gets_its_whole_output(tmp_path: Path) -> None:
    """One build for two waiters, the second coming once output began: each preparation log holds
    all of it, as build.log does (here a build that fails at its first step)."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho first words\nsleep 0.5\necho last words\nexit 3\n")
    fake.chmod(0o755)
    images = Images({"x": Requirements(requirements=["pkg"], python=str(fake))}, tmp_path / "images", False)
    early, late = tmp_path / "early.log", tmp_path / "late.log"

    async def both() -> list[BaseException | object]:
        first = asyncio.create_task(images.prepare("x", early))
        deadline = time.monotonic() + 10
        while b"first words" not in (early.read_bytes() if early.exists() else b""):
            assert time.monotonic() < deadline, "the build said nothing"
            await asyncio.sleep(0.02)
        second = asyncio.create_task(images.prepare("x", late))
        return await asyncio.gather(first, second, return_exceptions=True)

    results = asyncio.run(both())
    assert all(isinstance(r, BuildFailed) and "exit 3" in str(r) for r in results), results
    built = (images.builds.place(images.specs["x"]) / "build.log").read_text()  # type: ignore[arg-type]
    assert early.read_text() == late.read_text() == built
    assert "first words" in built and "last words" in built and built.startswith("$ ")
