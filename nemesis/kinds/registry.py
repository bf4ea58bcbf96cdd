"""The registry of fault kinds: `register` is the class decorator each kind module uses."""

from __future__ import annotations

from nemesis.kinds.base import FaultKind

# Families in the order kinds are listed to users (configs, docs, error messages).
FAMILIES = ("process", "partition", "host", "outage", "link", "toxic", "disk")
_KINDS: dict[str, FaultKind] = {}


def register(cls: type[FaultKind]) -> type[FaultKind]:
    if cls.name in _KINDS:
        raise ValueError(f"fault kind {cls.name!r} registered twice")
    if cls.family not in FAMILIES:
        raise ValueError(f"fault kind {cls.name!r}: unknown family {cls.family!r}")
    _KINDS[cls.name] = cls()
    return cls


def all_kinds() -> list[FaultKind]:
    """Every registered kind, by family, then in registration order."""
    order = {f: i for i, f in enumerate(FAMILIES)}
    return sorted(_KINDS.values(), key=lambda k: order[k.family])


def lookup(name: str) -> FaultKind:
    try:
        return _KINDS[name]
    except KeyError:
        known = ", ".join(k.name for k in all_kinds())
        raise ValueError(f"unknown fault kind {name!r}; known: {known}") from None
