"""Field types every request model uses: text that storage and JSON can hold, bounded integers.

A string with a NUL byte or a lone surrogate is accepted by the JSON parser but breaks the database
driver or the JSON encoder later (for every reader of that row), so it is refused at the edge.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, ConfigDict, Field, PlainValidator, StringConstraints

INT64_MAX = 2**63 - 1
# Bounds that keep every integer inside a signed 64-bit column on both backends.
Int64 = Annotated[int, Field(ge=-INT64_MAX, le=INT64_MAX)]
Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
Serial = Annotated[int, Field(ge=0, le=2**31 - 1)]
"""Epochs and generations (32-bit columns)."""
Offset = Annotated[int, Field(ge=0, le=2**62)]
"""Byte offsets and counts: room to add a piece's size without overflowing 64 bits."""

STRICT = ConfigDict(extra="forbid", strict=True)
"""Request models: unknown fields and silent type coercion (true -> 1, "5" -> 5) refused."""
REQUEST = ConfigDict(extra="forbid", strict=True, frozen=True)
"""The agent protocol's requests: as STRICT, and a value once built (the agent builds them)."""
REPLY = ConfigDict(extra="forbid", frozen=True)
"""The agent protocol's replies and the log shipment's query: unknown fields refused, and a value
once built; not strict, since a query string's numbers and a reply's enums arrive as text."""


def clean_text(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL bytes")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode (no lone surrogates)") from None
    return value


def safe_text(value: str) -> str:
    """For messages that echo user input: never fails to encode."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def _amount(value: Any) -> int | float | str:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError("must be a number, or a string like '64M' or '500m'")
    if isinstance(value, str) and len(value) > 64:
        raise ValueError("must be at most 64 characters")
    return value


Amount = Annotated[int | float | str, PlainValidator(_amount, json_schema_input_type=int | float | str)]
"""A resource amount as written (parsed and range-checked by the domain)."""
SlotName = Annotated[str, StringConstraints(max_length=64), AfterValidator(clean_text)]
Text = Annotated[str, AfterValidator(clean_text)]
# Bounded texts: the length is checked on the string itself, so the error speaks of characters
# (`Annotated[Text, StringConstraints(...)]` checked it after the validator, as a count of "items").
Text64 = Annotated[str, StringConstraints(max_length=64), AfterValidator(clean_text)]
Text128 = Annotated[str, StringConstraints(max_length=128), AfterValidator(clean_text)]
Text256 = Annotated[str, StringConstraints(max_length=256), AfterValidator(clean_text)]
Name = Annotated[str, StringConstraints(min_length=1, max_length=128), AfterValidator(clean_text)]
LongText = Annotated[str, StringConstraints(max_length=1 << 20), AfterValidator(clean_text)]


def scrub(value: Any, depth: int = 0) -> Any:
    """Make text a kernel produced storable: NULs and lone surrogates become U+FFFD (agent side)."""
    if isinstance(value, str):
        if "\x00" in value:
            value = value.replace("\x00", "\ufffd")
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if depth > 32:
        return None
    if isinstance(value, dict):
        return {scrub(str(k), depth + 1): scrub(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v, depth + 1) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT64_MAX:
        return str(value)
    if isinstance(value, float) and (value != value or abs(value) == float("inf")):
        return str(value)
    return value


def _clean_json(value: Any, depth: int = 0) -> Any:
    if depth > 32:
        raise ValueError("nested too deeply")
    if isinstance(value, str):
        clean_text(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            clean_text(str(k))
            _clean_json(v, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _clean_json(v, depth + 1)
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT64_MAX:
        raise ValueError("integer out of range")
    return value


JsonObject = Annotated[dict[str, Any], AfterValidator(_clean_json)]
"""Free-form JSON whose every string is storable and every integer fits 64 bits."""
