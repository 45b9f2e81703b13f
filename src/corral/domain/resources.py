"""Resource slots with exact arithmetic, and parsing of user-written amounts."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

CPU, MEM, GPU = "cpu", "mem", "gpu"
BUILTIN_SLOTS = (CPU, MEM, GPU)

# Binary units only, case as written: Kubernetes reads a lowercase "64m" as millibytes and "64k" as
# decimal, so a lowercase unit is refused rather than guessed.
_MEM_UNITS = {
    "": 1,
    "B": 1,
    **{u: 1024**i for i, u in enumerate("KMGT", start=1)},
    **{u + "B": 1024**i for i, u in enumerate("KMGT", start=1)},
    **{u + "i": 1024**i for i, u in enumerate("KMGT", start=1)},
    **{u + "iB": 1024**i for i, u in enumerate("KMGT", start=1)},
}
SIZE_FORMS = "bytes, or a number with K, M, G, T or Ki, Mi, Gi, Ti (binary; a B may follow), e.g. 64M"
# No real node has more than this of anything (bytes included); larger values are typing mistakes.
MAX_AMOUNT = Decimal(2**60)
_AMOUNT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")
_SLOT_NAME = re.compile(r"^[a-z][a-z0-9_.\-/]{0,63}$")


class ResourceError(ValueError):
    """A resource amount or name that cannot be accepted; `field` names the slot."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _number(field: str, value: object) -> Decimal:
    if isinstance(value, bool):
        raise ResourceError(field, f"{field} must be a number")
    if isinstance(value, int | Decimal):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, str):
        try:
            return Decimal(value.strip())
        except InvalidOperation:
            pass
    raise ResourceError(field, f"{field} must be a number, got {value!r}")


def parse_mem(value: object, field: str = MEM) -> int:
    """Bytes from an int or a string with binary units: '64M' is 64 MiB, '512Ki', '2GiB'."""
    if isinstance(value, str):
        m = _AMOUNT.match(value)
        unit = m.group(2) if m else None
        if m is None or unit not in _MEM_UNITS:
            raise ResourceError(field, f"{field}: cannot read {value[:40]!r} as a size: write {SIZE_FORMS}")
        amount = Decimal(m.group(1)) * _MEM_UNITS[unit]
    else:
        amount = _number(field, value)
    if amount != amount.to_integral_value():
        raise ResourceError(field, f"{field} must be a whole number of bytes")
    return int(amount)


def parse_cpu(value: object, field: str = CPU) -> Decimal:
    """Cores from a number or a string; '500m' is half a core."""
    if isinstance(value, str) and value.strip().endswith("m"):
        return _number(field, value.strip()[:-1]) / 1000
    return _number(field, value)


def parse_amount(name: str, value: object) -> Decimal:
    """One slot's amount, in its canonical unit (cores, bytes, devices, units)."""
    if not _SLOT_NAME.match(name):
        raise ResourceError(name, f"invalid resource slot name {name!r}")
    if name == MEM:
        amount = Decimal(parse_mem(value))
    elif name == CPU:
        amount = parse_cpu(value)
    else:
        amount = _number(name, value)
    if not amount.is_finite():
        raise ResourceError(name, f"{name} must be finite")
    if amount < 0:
        raise ResourceError(name, f"{name} must not be negative")
    if amount > MAX_AMOUNT:
        raise ResourceError(name, f"{name} is larger than any node could have (max {MAX_AMOUNT})")
    if name == GPU and amount != amount.to_integral_value():
        raise ResourceError(name, "gpu must be a whole number of devices")
    return amount.normalize() if amount else Decimal(0)


@dataclass(frozen=True)
class ResourceSlots(Mapping[str, Decimal]):
    """An exact amount per slot name; missing slots are zero."""

    amounts: Mapping[str, Decimal] = field(default_factory=dict)
    """Slot name to amount (cores, bytes, devices, custom units)."""

    @classmethod
    def parse(cls, raw: Mapping[str, object]) -> ResourceSlots:
        return cls({k: parse_amount(k, v) for k, v in raw.items()})

    def __getitem__(self, key: str) -> Decimal:
        return self.amounts.get(key, Decimal(0))

    def __iter__(self) -> Iterator[str]:
        return iter(self.amounts)

    def __len__(self) -> int:
        return len(self.amounts)

    def _combine(self, other: ResourceSlots, sign: int) -> ResourceSlots:
        keys = set(self.amounts) | set(other.amounts)
        return ResourceSlots({k: self[k] + sign * other[k] for k in sorted(keys)})

    def __add__(self, other: ResourceSlots) -> ResourceSlots:
        return self._combine(other, 1)

    def __sub__(self, other: ResourceSlots) -> ResourceSlots:
        return self._combine(other, -1)

    def times(self, n: int) -> ResourceSlots:
        """n of these (n kernels asking for the same slots)."""
        return ResourceSlots({k: v * n for k, v in self.amounts.items()})

    def fits_in(self, free: ResourceSlots) -> bool:
        return all(self[k] <= free[k] for k in self.amounts if self[k] > 0)

    def nonzero(self) -> ResourceSlots:
        return ResourceSlots({k: v for k, v in self.amounts.items() if v != 0})

    def to_json(self) -> dict[str, str]:
        """Decimal amounts as strings, so storage round-trips exactly."""
        return {k: str(v) for k, v in sorted(self.amounts.items())}

    @classmethod
    def from_json(cls, raw: Mapping[str, str | int | float]) -> ResourceSlots:
        return cls({k: Decimal(str(v)) for k, v in raw.items()})

    def to_public(self) -> dict[str, float | int]:
        """API shape: cpu float cores, mem int bytes, gpu int, custom as int when whole."""
        out: dict[str, float | int] = {}
        for k, v in sorted(self.amounts.items()):
            if k == CPU:
                out[k] = float(v)
            elif v == v.to_integral_value():
                out[k] = int(v)
            else:
                out[k] = float(v)
        return out
