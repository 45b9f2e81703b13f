"""How assembly refuses to start: lines for the operator and an exit status, never a traceback."""

from __future__ import annotations

import re
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsError

S = TypeVar("S", bound=BaseSettings)


class BootFailure(Exception):
    """A process that cannot start: each line is shown as `error: <line>`; `code` is the exit status
    (2: a setting or an option is wrong)."""

    def __init__(self, *lines: str, code: int = 1) -> None:
        super().__init__("; ".join(lines))
        self.lines = lines
        self.code = code


def from_env(kind: type[S], **given: Any) -> S:
    """Settings read from the environment (and `given`); one that does not parse or is out of range
    fails naming its variable and what is wrong, never its value (it may be a secret)."""
    prefix = str(kind.model_config.get("env_prefix", ""))
    try:
        return kind(**given)
    except ValidationError as exc:
        wrong = [(str(e["loc"][0]), e["msg"]) for e in exc.errors(include_input=False)]
    except SettingsError as exc:  # a value that is not JSON where JSON is read (a mapping)
        found = re.search(r'field "(\w+)"', str(exc))
        wrong = [(found.group(1) if found else "?", "not valid JSON")]
    raise BootFailure(*(f"{prefix}{field.upper()}: {message}" for field, message in wrong), code=2)
