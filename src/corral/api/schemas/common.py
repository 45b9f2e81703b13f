"""Limits and value types every request shape shares (README "Limits")."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, StringConstraints

from corral.domain.spec import parse_duration
from corral.protocol.types import Amount, clean_text

# Documented limits (README "Limits"): a request past them is refused with 422 naming the field.
MAX_COMMAND_ARGS = 4096


MAX_COMMAND_BYTES = 128 * 1024


MAX_ENV_VARS = 512


MAX_ENV_BYTES = 128 * 1024


MAX_TIMEOUT = 10 * 365 * 86400


ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


EnvName = Annotated[str, StringConstraints(pattern=ENV_NAME, max_length=256)]


CreationId = Annotated[str, StringConstraints(min_length=1, max_length=200), AfterValidator(clean_text)]


Duration = Annotated[float, BeforeValidator(parse_duration)]


def _absolute(path: str) -> str:
    if not path.startswith("/"):
        raise ValueError("must be an absolute path (it is the agent's, not yours)")
    return path


Workdir = Annotated[
    str,
    StringConstraints(min_length=1, max_length=4096),
    AfterValidator(clean_text),
    AfterValidator(_absolute),
]


def _default_resources() -> dict[str, Amount]:
    return {"cpu": 1}
