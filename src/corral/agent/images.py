"""The runtime environments an agent offers, by name: what each spec means and what a kernel run in
one gets (PATH first, VIRTUAL_ENV). Building a requirements list is agent/image_build.py's.

Four kinds, from the agent's `--image NAME=JSON` or CORRAL_AGENT_IMAGES:
    {"python": "/usr/bin/python3.11"}          an interpreter (`python`, `python3` on PATH are it)
    {"venv": "/opt/envs/torch"}                an existing virtualenv
    {"path": "/opt/tools/bin"}                 a directory put first on PATH
    {"requirements": ["numpy==2.1"], "python": "/usr/bin/python3"}
                                               a virtualenv the agent builds, shared by hash
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from corral.protocol.types import Name, clean_text

_SPEC = ConfigDict(extra="forbid", frozen=True)
Requirement = Annotated[str, Field(min_length=1, max_length=500), AfterValidator(clean_text)]
"""One pip requirement (a NUL byte could never reach pip's command line)."""


def _absolute(value: str) -> str:
    if not os.path.isabs(value) or "\0" in value:
        raise ValueError("an absolute path")
    return os.path.normpath(value)


class _OnePath(BaseModel):
    """A kind given by one absolute path."""

    model_config = _SPEC

    @field_validator("*")
    @classmethod
    def _path(cls, value: str) -> str:
        return _absolute(value)


class Interpreter(_OnePath):
    python: str


class Venv(_OnePath):
    venv: str


class BinDir(_OnePath):
    path: str


class Requirements(BaseModel):
    model_config = _SPEC
    requirements: list[Requirement] = Field(min_length=1, max_length=200)
    python: str | None = None

    @field_validator("python")
    @classmethod
    def _python(cls, value: str | None) -> str | None:
        return None if value is None else _absolute(value)

    def interpreter(self) -> str:
        """The interpreter its virtualenv is made from (the agent's own when none is named)."""
        return self.python or sys.executable

    def key(self) -> str:
        """The build's identity: one virtualenv per (interpreter, requirements), whoever names it."""
        given = json.dumps([self.interpreter(), self.requirements])
        return hashlib.sha256(given.encode()).hexdigest()[:16]


ImageSpec = Interpreter | Venv | BinDir | Requirements
_SPECS: TypeAdapter[dict[str, ImageSpec]] = TypeAdapter(dict[Name, ImageSpec])
KINDS = {Interpreter: "python", Venv: "venv", BinDir: "path", Requirements: "requirements"}


class ImageError(ValueError):
    """A spec that does not parse, or names what is not there; the message names the image."""


def parse(given: dict[str, Any]) -> dict[str, ImageSpec]:
    """The agent's images from their JSON specs; names as a session's `image` may be."""
    try:
        specs = _SPECS.validate_python(given)
    except ValidationError as exc:
        first = exc.errors(include_input=False)[0]
        name = str(first["loc"][0]) if first["loc"] else "?"
        if "[key]" in first["loc"]:
            raise ImageError(
                f"image {name[:64]!r}: a name of 1 to 128 characters, as `image` takes"
            ) from None
        raise ImageError(f"image {name!r}: {_spec_error(given.get(name))}") from None
    for name, spec in specs.items():
        if (missing := _missing(spec)) is not None:
            raise ImageError(f"image {name!r}: {missing}")
    return specs


def parse_option(values: list[str]) -> dict[str, Any]:
    """`--image NAME=JSON`, repeatable, as the JSON object CORRAL_AGENT_IMAGES holds."""
    found: dict[str, Any] = {}
    for value in values:
        name, sep, text = value.partition("=")
        if not sep or not name:
            raise ImageError(
                f'--image {value!r}: give NAME=JSON, e.g. py311=\'{{"python": "/usr/bin/python3.11"}}\''
            )
        try:
            found[name] = json.loads(text)
        except ValueError:
            raise ImageError(f"image {name!r}: its spec is not JSON") from None
    return found


def _spec_error(spec: Any) -> str:
    if not isinstance(spec, dict):
        return "its spec must be a JSON object"
    return (
        'give one of {"python": PATH}, {"venv": DIR}, {"path": DIR} or {"requirements": [...],'
        ' "python": PATH} (paths absolute; requirements 1 to 200, each at most 500 characters)'
    )


def _missing(spec: ImageSpec) -> str | None:
    """What a spec names that is not there (a requirements list is checked when built)."""
    match spec:
        case Interpreter(python=python) | Requirements(python=str(python)):
            if not os.access(python, os.X_OK) or not Path(python).is_file():
                return f"{python} is not an executable file"
        case Venv(venv=venv):
            if not os.access(Path(venv) / "bin" / "python", os.X_OK):
                return f"{venv} is not a virtualenv (no bin/python)"
        case BinDir(path=path):
            if not Path(path).is_dir():
                return f"{path} is not a directory"
    return None


@dataclass(frozen=True)
class Environment:
    """What a kernel run in an image gets: directories put first on PATH, and VIRTUAL_ENV."""

    bin_dirs: tuple[str, ...]
    virtual_env: str | None = None

    def apply(self, env: dict[str, str]) -> None:
        env["PATH"] = os.pathsep.join(p for p in (*self.bin_dirs, env.get("PATH", os.defpath)) if p)
        if self.virtual_env is not None:
            env["VIRTUAL_ENV"] = self.virtual_env
            env.pop("PYTHONHOME", None)


def environment(spec: ImageSpec, shims: Path, built: Path | None = None) -> Environment:
    """The environment of a ready image; `shims` holds an interpreter's `python`/`python3` links,
    `built` a requirements list's virtualenv."""
    match spec:
        case Interpreter():
            return Environment((str(shims),))
        case Venv(venv=venv):
            return Environment((str(Path(venv) / "bin"),), venv)
        case BinDir(path=path):
            return Environment((path,))
        case Requirements():
            assert built is not None, "a requirements image runs only once built"
            return Environment((str(built / "bin"),), str(built))
    raise AssertionError(spec)


def shim_dir(root: Path, name: str, python: str) -> Path:
    """`python` and `python3` linked to the interpreter, readable by every account."""
    shims = root / "shims" / name
    shims.mkdir(parents=True, exist_ok=True)
    for link in ("python", "python3"):
        target = shims / link
        if not target.is_symlink() or os.readlink(target) != python:
            tmp = shims / f".{link}.tmp"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(python)
            tmp.replace(target)
    for d in (root / "shims", shims):
        d.chmod(0o755)
    return shims
